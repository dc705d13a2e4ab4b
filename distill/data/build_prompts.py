"""Build the bundled prompt set: distill/data/train.jsonl and distill/data/heldout.jsonl.

Every prompt below was written by hand for this project (no public dataset was copied). This script only
wraps the hand-written texts into the JSONL format of docs/architecture.md ("Prompt files"), numbers them, and fixes the
train / held-out split. It is deterministic: running it twice gives byte-identical files.

    python distill/data/build_prompts.py          # rewrite both files next to this script
    python distill/data/build_prompts.py --check  # validate the existing files and print the counts table

Split rule: within each category, the items are numbered in the order written here (id "<category>-NNNN",
1-based); item k goes to held-out when (k - 1) % 6 == 0, i.e. the 1st, 7th, 13th, ... item, and to train
otherwise. New prompts appended at the end of a list never move an existing prompt between splits.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from decode import cli

HERE = Path(__file__).resolve().parent
CATEGORIES = ["chat", "writing", "qa", "summarization", "code", "math", "translation", "context_qa"]
HELDOUT_EVERY = 6  # 1 in 6 of each category is held out
PASSAGE_WORDS = (60, 200)  # word range of the passages in summarization / context_qa


# --- helpers: each returns a list of messages; a bare string means one user turn ---


def S(system: str, user: str) -> list[dict]:
    """A prompt with a short system message."""
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def T(user1: str, assistant: str, user2: str) -> list[dict]:
    """A multi-turn prompt: user / assistant / user."""
    return [
        {"role": "user", "content": user1},
        {"role": "assistant", "content": assistant},
        {"role": "user", "content": user2},
    ]


def _check_passage(passage: str) -> str:
    n = len(passage.split())
    lo, hi = PASSAGE_WORDS
    if not lo <= n <= hi:
        raise ValueError(f"passage has {n} words, expected {lo}-{hi}: {passage[:60]!r}")
    return passage


def P(instruction: str, passage: str, after: bool = False) -> str:
    """Summarization prompt: the instruction before the passage, or after it when after=True."""
    _check_passage(passage)
    return f"{passage}\n\n{instruction}" if after else f"{instruction}\n\n{passage}"


# Context-QA layouts; the layout of an item is given explicitly so that the mix is visible here.
_CQ_LAYOUTS = {
    "cq": "Context: {p}\n\nQuestion: {q}",
    "read": "Read the passage and answer the question.\n\n{p}\n\nQuestion: {q}",
    "after": "{p}\n\n{q}",
    "based": "Based on the text below, answer this: {q}\n\n{p}",
    "quote": '"{p}"\n\nUsing only the text above: {q}',
}


def Q(passage: str, question: str, layout: str = "cq") -> str:
    """Context-QA prompt: a passage and a question answerable from it."""
    _check_passage(passage)
    return _CQ_LAYOUTS[layout].format(p=passage, q=question)


# --- chat: casual, advice, conversational ---

CHAT = [
    "I have a job interview tomorrow and I'm really nervous. Any tips to calm down the night before?",
    "What's a good way to start a conversation with someone at a party when I don't know anyone?",
    "Can you recommend a few hobbies I could pick up that don't cost much money?",
    "hey, how's it going? I'm bored and want to chat for a bit",
    "My roommate keeps leaving dirty dishes in the sink. How do I bring it up without starting a fight?",
    "I want to start running but I get tired after five minutes. How should I begin?",
    "What are some fun things to do on a rainy Sunday at home?",
    "I keep procrastinating on my assignments. Do you have any practical advice?",
    "Suggest a simple dinner I can make with eggs, spinach, and some leftover rice.",
    "Is it weird to eat cereal for dinner?",
    "My friend forgot my birthday and I feel hurt. Should I say something?",
    "What should I pack for a weekend camping trip in the mountains?",
    "I just moved to a new city. How can I make friends as an adult?",
    "Give me three ideas for a cheap but thoughtful anniversary gift.",
    "How do I stop checking my phone first thing in the morning?",
    "Tell me a joke about cats.",
    "What's the best way to learn a new language if I only have 15 minutes a day?",
    "I'm thinking of adopting a dog but I work full time. Is that a bad idea?",
    "Can you help me plan a relaxing evening routine so I sleep better?",
    "My plants keep dying. I water them every day. What am I doing wrong?",
    "What would you say to someone who feels like they're falling behind their friends in life?",
    "I have $50 to spend on a date night. Any ideas?",
    "Should I rent or buy a home in my twenties? Just give me the main things to consider.",
    "How can I be more confident when speaking up in meetings?",
    "I'm hosting a game night for six people. What games work well for a mixed group?",
    "What's a polite way to decline an invitation to a wedding?",
    "I feel tired all the time even though I sleep eight hours. What could be going on?",
    "Recommend a few feel-good movies for a movie night with my family.",
    "How do I keep my motivation up when learning to play guitar?",
    "My neighbor's dog barks all night. What can I do about it?",
    "What are some good questions to ask on a first date?",
    "I want to save money on groceries. Where do I start?",
    "Can you cheer me up? I had a really rough day at work.",
    "Is it okay to quit a job after only three months?",
    "What's your favorite season and why? Just curious what you'd pick.",
    "How can I make my small apartment feel less cluttered?",
    "I'm going to Japan for the first time next month. Any etiquette tips I should know?",
    "What are some easy ways to drink more water during the day?",
    "My teenager barely talks to me anymore. How can I reconnect with them?",
    "Give me a quick 10-minute workout I can do without any equipment.",
    "I'm trying to decide between a cat and a rabbit as my first pet. Thoughts?",
    "How do I tell my boss I'm overwhelmed with my workload?",
    "What should I do on my first day at a new job to make a good impression?",
    "Any tips for staying focused while working from home?",
    "I always forget people's names right after meeting them. How can I get better at remembering?",
    "What's a good book to read if I liked The Hobbit?",
    "My sister and I had an argument and haven't spoken in a week. How do I make up with her?",
    "Suggest a few fun activities for a kid's birthday party at home.",
    "How do I politely ask a friend to pay back money they owe me?",
    "what's something interesting I can learn about in 5 minutes?",
    "I want to start journaling. What should I write about?",
    "How do I deal with a coworker who keeps taking credit for my work?",
    "What are some good snacks for a long road trip?",
    "I get anxious when I have to make phone calls. Any tricks to make it easier?",
    "Is it worth learning to cook if I live alone? It feels like a lot of effort for one person.",
    "How can I be a better listener?",
    "Plan a lazy Saturday for me in a city I've never visited before.",
    "I'm turning 40 next week and feeling a bit weird about it. Any perspective?",
    "What are some ways to reduce screen time for my kids without constant fights?",
    "How often should I wash my bed sheets?",
    "I'm bad at saying no to people. How do I set boundaries?",
    "Help me come up with a name for my new goldfish.",
    "What's a good morning routine for someone who isn't a morning person?",
    "I want to get back into reading but can't seem to finish any books. Advice?",
    "How do I stay calm on a long flight when I'm scared of flying?",
    "What can I do to feel less lonely on weekends?",
    "Would you rather be able to fly or be invisible? Explain your choice.",
    "How do I make a good impression when meeting my partner's parents for the first time?",
    "I spilled coffee on my laptop keyboard. What should I do right now?",
    "Suggest a theme for a dinner party that's a bit different from the usual.",
    "How should I prepare for my first marathon if the race is in four months?",
    "I just got my first paycheck. What should I do with it?",
    "What's the best way to apologize to someone I hurt without meaning to?",
    "My cat keeps scratching the couch. How do I get her to stop?",
    "Any tips for keeping a conversation going over text?",
    "I want to redecorate my bedroom on a small budget. Where should I start?",
    "How can I stop overthinking everything before I fall asleep?",
    "Give me some encouragement. I'm about to take my driving test.",
    "What's a nice thing I could do for my mom this weekend?",
    "Is it rude to wear headphones in the office?",
    T(
        "I'm thinking about learning to bake bread.",
        "That's a great hobby! Bread baking is very rewarding. Are you thinking of simple loaves or something like sourdough?",
        "Probably something simple first. What's the easiest bread to start with?",
    ),
    T(
        "Can you suggest a book for my trip?",
        "Sure! What kind of books do you usually enjoy: mysteries, fantasy, nonfiction, something else?",
        "I like mysteries, but nothing too dark.",
    ),
    T(
        "I want to start going to the gym.",
        "Nice! Do you have a goal in mind, like building strength, losing weight, or just feeling healthier?",
        "Mostly just feeling healthier. How many days a week should I go at first?",
    ),
    T(
        "My best friend is moving abroad next month.",
        "That can be bittersweet. It's exciting for them, but it's natural to feel sad about the distance.",
        "Yeah. What are some ways we can stay close while living in different time zones?",
    ),
    T(
        "What's a good houseplant for beginners?",
        "A pothos is a great choice. It tolerates low light, doesn't mind if you forget to water it now and then, and grows quickly.",
        "Is it safe to have around cats?",
    ),
    T(
        "I'm planning a surprise party for my husband.",
        "How fun! Do you have a date and a rough guest count in mind?",
        "It's in three weeks, about twenty people. How do I keep it a secret from him?",
    ),
    T(
        "I can't decide what to cook tonight.",
        "Let's figure it out. What ingredients do you have at home, and how much time do you have?",
        "I have pasta, canned tomatoes, garlic and some cheese. About 30 minutes.",
    ),
    T(
        "Do you like music?",
        "I don't listen to music the way people do, but I enjoy talking about it! What kind of music do you like?",
        "Mostly jazz. Can you recommend some albums for someone just getting into it?",
    ),
    T(
        "I failed my exam today.",
        "I'm sorry, that's really disappointing. How are you feeling about it?",
        "Pretty bad. I studied a lot. How do I figure out what went wrong for next time?",
    ),
    S(
        "You are a friendly assistant who gives brief, practical answers.",
        "What's a quick way to make my bedroom smell nicer?",
    ),
    S(
        "You are a supportive life coach. Keep answers under 100 words.",
        "I want to change careers at 35 but I'm scared it's too late.",
    ),
    S(
        "You are a helpful assistant. Answer in a cheerful tone.",
        "Give me an idea for something fun to do with my kids this afternoon.",
    ),
    S("Keep your replies short and kind.", "I'm nervous about my first day at a new school tomorrow."),
]

# --- writing: emails, stories, poems, product copy, rewrites ---

WRITING = [
    "Write a short email to my landlord asking when the broken heater will be fixed.",
    "Write a haiku about autumn leaves.",
    "Write a product description for a stainless steel water bottle that keeps drinks cold for 24 hours.",
    'Rewrite this sentence to sound more professional: "Hey, I can\'t make the meeting, something came up."',
    "Write a short story (about 150 words) about a robot who learns to paint.",
    "Write a thank-you note to a teacher who helped me through a hard year.",
    "Compose a limerick about a forgetful wizard.",
    "Write the opening paragraph of a cover letter for a junior graphic designer position.",
    "Write a birthday message for my grandfather, who is turning 90.",
    'Rewrite the following in simpler words: "The committee has resolved to postpone the deliberations pending further information."',
    "Write a four-line poem about the ocean at night.",
    "Draft a polite email declining a job offer.",
    "Write a catchy slogan for a neighborhood bakery.",
    "Write a short horror story in exactly five sentences.",
    "Write a LinkedIn post announcing that I've started a new job as a data analyst.",
    "Describe a busy city street at rush hour in vivid detail.",
    "Write a product description for a handmade wool scarf.",
    'Make this text friendlier: "Your request has been received. Do not reply to this email."',
    "Write a toast for my best friend's wedding. Keep it under 200 words.",
    "Write a poem about a cup of coffee on a Monday morning.",
    "Write an apology email to a customer whose order arrived late.",
    "Write the opening paragraph of a mystery novel set in a lighthouse.",
    "Write a short bio for a freelance photographer's website.",
    "Turn this into a bullet list: We need milk, two dozen eggs, flour for the cake, some apples and a bag of rice.",
    "Write a motivational quote for students during exam week.",
    "Write a dialogue between a cat and a dog arguing about who is the better pet.",
    "Write an email to my team reminding them about the deadline on Friday.",
    "Write a fairy tale for kids about a brave little turtle.",
    'Rewrite this paragraph in the past tense: "She walks to the market. She buys fresh bread and talks to the baker. Then she goes home."',
    "Write a description of a cozy mountain cabin for a vacation rental listing.",
    "Write a sonnet about the moon.",
    "Write a text message inviting my friends to a barbecue on Saturday.",
    "Write a short speech for a high school graduation ceremony.",
    'Fix the grammar in this sentence: "Me and him goes to the store yesterday and buyed some apple."',
    "Write a complaint letter about a noisy construction site near my house.",
    "Write a product description for wireless earbuds aimed at runners.",
    "Write a poem about friendship that doesn't rhyme.",
    "Write a short story about a girl who finds a map in her grandmother's attic.",
    "Write a tweet announcing the launch of a new recipe app.",
    'Make this sentence more concise: "In my personal opinion, I think that we should probably consider the possibility of changing the plan."',
    "Write a resignation letter that is short and polite.",
    "Write a children's rhyme about brushing your teeth.",
    "Write a restaurant review for a small Italian place with great pasta but slow service.",
    "Write an out-of-office reply for when I'm on vacation until the 15th.",
    "Describe the smell of rain to someone who has never experienced it.",
    "Write a short science fiction story about the last tree on Earth.",
    "Write an invitation for a monthly book club meeting.",
    'Write a product description for a scented soy candle called "Forest Morning".',
    'Rewrite this to sound more confident: "I think maybe I could possibly help with the project if that\'s okay."',
    "Write a short poem for a Mother's Day card.",
    "Write a blog post introduction about the benefits of walking every day.",
    "Write a friendly reminder to a client about an unpaid invoice.",
    'Write a story that begins with the line: "The elevator stopped between floors, and the lights went out."',
    "Write a description of a dragon for a fantasy game.",
    "Write a get-well-soon message for a coworker recovering from surgery.",
    'Paraphrase this: "Practice makes perfect, but nobody is perfect, so why practice?"',
    "Write a short ad for a used bicycle I'm selling.",
    "Write a letter from a lighthouse keeper to his daughter, who lives far away in the city.",
    "Write a cinquain about snow.",
    "Write an email asking my professor for an extension on my essay.",
    "Write a short fable with a moral about patience.",
    "Write a welcome message for new members of an online gardening forum.",
    "Write an inspiring paragraph about starting over after failure.",
    'Rewrite this formal sentence in casual language: "We regret to inform you that the event has been cancelled due to unforeseen circumstances."',
    "Write a short story told from the point of view of an old pair of shoes.",
    "Write a product description for a kids' educational board game about space.",
    "Write a poem about a train journey through the countryside.",
    "Write a short message to a friend congratulating them on their new baby.",
    "Give me three possible titles for a blog post about budget travel in Europe.",
    "Write a short tribute to a beloved family dog who passed away.",
    "Write a short story about two strangers sharing an umbrella.",
    'Expand this into a full paragraph: "Cities should have more parks."',
    "Write the back-cover blurb for a fantasy novel about a thief who steals memories.",
    "Write an email to a neighbor introducing myself after moving in.",
    "Write a funny poem about Mondays.",
    "Write a script for a 30-second radio ad for a car wash.",
    "Write an acrostic poem using the word HOPE.",
    "Write a short review of a pair of hiking boots after three months of use.",
    "Rewrite this text message to sound less angry: \"You're late AGAIN. I've been waiting for 30 minutes.\"",
    T(
        "Write a short poem about the sea.",
        "The sea rolls in with silver light,\nit hums a song into the night,\nand every wave that finds the shore\nreturns to sing it all once more.",
        "Nice! Can you make it sadder, about someone missing home?",
    ),
    T(
        "Can you write a subject line for an email about our quarterly sales meeting?",
        'Sure: "Reminder: Q3 Sales Meeting on Thursday at 10 AM"',
        "Now write the body of the email, short and friendly.",
    ),
    T(
        "I need a tagline for my coffee shop.",
        'How about: "Brewed with care, served with a smile."',
        "I like it, but can you give me a few options that mention we're open late?",
    ),
    T(
        "Write the first line of a story about a haunted library.",
        "Every night at midnight, the books on the third floor rearranged themselves, and nobody ever saw who did it.",
        "Great, continue the story for another paragraph.",
    ),
    T(
        "Help me write a message to my friend.",
        "Of course! What's the message about, and what tone do you want: casual, heartfelt, funny?",
        "I want to thank her for helping me move last weekend. Casual and a bit funny.",
    ),
    T(
        "Describe a sunset in one sentence.",
        "The sun slid below the hills, leaving the sky streaked with orange and pink like spilled paint.",
        "Now describe a sunrise in the same style.",
    ),
    T(
        "Suggest a product name for an eco-friendly laundry detergent.",
        'How about "PureWave"?',
        "Good. Now write a two-sentence description for the bottle label.",
    ),
    T(
        "I'm writing a speech for my dad's retirement party.",
        "That's a lovely occasion. What did he do for work, and is there a story or quality you'd like to highlight?",
        "He was a mail carrier for 35 years and everyone in the neighborhood knows him. Can you write a short opening?",
    ),
    T(
        "Write a haiku about winter.",
        "Bare branches shiver\nsnow hushes the empty street\nbreath hangs in the air",
        "Now write one about summer.",
    ),
    S(
        "You are a professional copywriter. Write concise, persuasive copy.",
        "Write a short description for a standing desk that adjusts at the push of a button.",
    ),
    S(
        "You write in a warm, old-fashioned style.",
        "Write a short letter inviting my cousin to visit the farm this summer.",
    ),
    S(
        "You are an editor. Return only the corrected text.",
        'Correct this: "Their going to the park tomorow, weather or not it rains."',
    ),
    S(
        "You are a children's author.",
        "Write a bedtime story about a sleepy owl who can't fall asleep during the day.",
    ),
]

# --- qa: factual and explanatory questions ---

QA = [
    "Why is the sky blue?",
    "How do vaccines work?",
    "What causes the seasons on Earth?",
    "Who was Cleopatra?",
    "What is the capital of Australia?",
    "How does a refrigerator keep food cold?",
    "What is photosynthesis, in simple terms?",
    "Why did the Western Roman Empire fall?",
    "What's the difference between weather and climate?",
    "How do airplanes stay in the air?",
    "What is the longest river in the world?",
    "What is DNA and why is it important?",
    "How do bees make honey?",
    "What was the Industrial Revolution?",
    "Why do we have leap years?",
    "What is the difference between a virus and a bacterium?",
    "How does a rainbow form?",
    "What are black holes?",
    "Which countries border Germany?",
    "Briefly, how does the internet work?",
    "What causes earthquakes?",
    "Why do cats purr?",
    "What is inflation in economics?",
    "Who invented the printing press, and why was it important?",
    "How do tides work?",
    "What is the tallest mountain in Africa?",
    "Why do leaves change color in the fall?",
    "What does the heart do?",
    "How does a battery store energy?",
    "What was the Cold War?",
    "What's the difference between an alligator and a crocodile?",
    "Why is the ocean salty?",
    "What does a CPU do in a computer?",
    "How many planets are in the solar system, and what are they called?",
    "What are the main causes of climate change?",
    "Who wrote Pride and Prejudice?",
    "How do noise-cancelling headphones work?",
    "What is the Great Barrier Reef?",
    "Why do we dream?",
    "What is the difference between a democracy and a republic?",
    "How do volcanoes form?",
    "What language is spoken in Brazil?",
    "What is the speed of light?",
    "How does GPS know where I am?",
    "What was the purpose of the Great Wall of China?",
    "What is an atom made of?",
    "Why do we get goosebumps?",
    "What is the largest desert in the world?",
    "How does a microwave oven heat food?",
    "What did the Magna Carta do?",
    "Why does ice float on water?",
    "What are antibiotics, and why shouldn't we overuse them?",
    "What's the difference between a comet and an asteroid?",
    "Explain how a bill becomes a law in the United States.",
    "Why does water boil at a lower temperature on top of a high mountain?",
    "Roughly what is the population of Canada?",
    "How do solar panels generate electricity?",
    "Who was Nelson Mandela?",
    "Why do onions make you cry?",
    "What causes thunder?",
    "What is the difference between RAM and storage on a computer?",
    "How were the pyramids of Giza built?",
    "What is gravity?",
    "Why do some animals hibernate?",
    "What was the Renaissance?",
    "How does the human eye see color?",
    "Where is the Sahara Desert?",
    "What are the three states of matter?",
    "What is a credit score and how is it calculated?",
    "How does a compass work?",
    "What did Marie Curie discover?",
    "Why do we need sleep?",
    "What is the difference between an ocean and a sea?",
    "How do fish breathe underwater?",
    "What is the United Nations, and when was it founded?",
    "Why is Pluto no longer considered a planet?",
    "How does caffeine keep you awake?",
    "Describe the water cycle.",
    "Explain what an electric current is.",
    "What is the smallest country in the world?",
    "How do plants know which way is up?",
    T(
        "What is the capital of Canada?",
        "The capital of Canada is Ottawa, located in the province of Ontario.",
        "Why isn't it Toronto, since that's the biggest city?",
    ),
    T(
        "What is a light-year?",
        "A light-year is the distance light travels in one year, about 9.46 trillion kilometers.",
        "So how far away is the nearest star in light-years?",
    ),
    T(
        "Who painted the Mona Lisa?",
        "The Mona Lisa was painted by Leonardo da Vinci, probably between 1503 and 1519.",
        "Where is it displayed today?",
    ),
    T(
        "What do bees eat?",
        "Bees mainly eat nectar, which gives them energy, and pollen, which provides protein.",
        "And why are they important for farming?",
    ),
    T(
        "What's the hottest planet?",
        "Venus is the hottest planet, with surface temperatures around 465 degrees Celsius.",
        "Why is it hotter than Mercury if Mercury is closer to the Sun?",
    ),
    T(
        "When did World War II end?",
        "World War II ended in 1945: in Europe in May, and in the Pacific in September.",
        "What were the main reasons it started?",
    ),
    T(
        "How many bones are in the human body?",
        "An adult human has 206 bones.",
        "Do babies have the same number?",
    ),
    T(
        "What is the largest ocean?",
        "The Pacific Ocean is the largest, covering about a third of Earth's surface.",
        "How deep does it get?",
    ),
    S(
        "You are a helpful science tutor for middle school students.",
        "Why do objects fall at the same speed in a vacuum?",
    ),
    S("Answer in one or two sentences.", "What is the main job of white blood cells?"),
    S("You are a knowledgeable history teacher.", "What caused the French Revolution?"),
]

# --- summarization: an original passage plus an instruction to summarize it ---

SUMMARIZATION = [
    P(
        "Summarize this announcement in two sentences.",
        "The Millbrook Public Library will close its main branch for renovations starting March 3. The eighteen-month project will replace the leaking roof, add an elevator, and expand the children's section by nearly a third. During construction, a temporary branch will operate out of the former hardware store on Elm Street, offering book pickup, printing, and a small reading area. Patrons can still return items at any of the three drop boxes around town. Library director Ana Reyes said the renovation was long overdue, noting that the building had not been significantly updated since 1974. Funding comes from a voter-approved bond and a grant from the state arts council.",
    ),
    P(
        "Give me a short summary of this passage:",
        "Researchers have long known that sleep helps memory, but a growing body of work suggests that different stages of sleep play different roles. During deep, slow-wave sleep, the brain appears to replay recent experiences, moving information from short-term storage in the hippocampus to longer-term storage in the cortex. REM sleep, the stage associated with vivid dreams, seems to be more involved in emotional memories and in finding connections between unrelated ideas. This may explain why people sometimes wake up with a solution to a problem they struggled with the night before. Cutting sleep short tends to reduce REM sleep in particular, since REM periods get longer toward morning.",
    ),
    P(
        "TL;DR this email for me.",
        "Hi all, quick update on the website redesign. The design team finished the new homepage mockups last week, and feedback from the user tests was mostly positive, although several testers found the navigation menu confusing on mobile. We'll need about two extra weeks to rework the menu, which pushes the launch from June 1 to June 15. Content migration is on track, and the marketing team has agreed to move the launch newsletter accordingly. Please let me know by Thursday if the new date causes problems for any of your teams. Thanks, Priya",
        after=True,
    ),
    P(
        "Summarize this story in a few sentences.",
        "Every morning for forty years, Tomas rowed his small boat out past the harbor before sunrise. He never caught much, a few mackerel, sometimes a sea bass, but he liked the silence and the way the fog lifted off the water. When his daughter asked him to move to the city to live with her family, he refused at first. Then one winter his hands grew too stiff to hold the oars. He sold the boat to a young woman who had just arrived in the village, and on his last morning he showed her where the fish gathered near the rocks. Now, from his daughter's apartment window, he watches the river and thinks of her rowing out into the fog.",
    ),
    P(
        "What are the pros and cons mentioned in this review? Summarize briefly.",
        "I bought this coffee grinder after my old one broke, and overall I'm happy with it. The burrs produce a much more even grind than my previous blade grinder, and I can taste the difference in my morning pour-over. It has fifteen grind settings, which is plenty for anything from espresso to French press. The downsides: it's fairly loud, and the plastic hopper feels a bit cheap. Cleaning is also annoying because grounds get stuck in the chute and you need the little brush that comes with it. For the price, though, I'd still recommend it to anyone who wants better coffee without spending a fortune.",
        after=True,
    ),
    P(
        "Summarize the following in three bullet points:",
        "The Silk Road was not a single road but a network of trade routes that connected China with Central Asia, the Middle East, and eventually Europe. It flourished from roughly the second century BCE to the fifteenth century CE. Merchants rarely traveled the entire length; instead, goods passed through many hands, with each trader covering one section. Silk, spices, paper, and ceramics moved west, while horses, glassware, wool, and precious metals moved east. Just as important as the goods were the ideas that traveled along these routes, including religions such as Buddhism, technologies like papermaking, and artistic styles. Diseases spread too, most famously the plague in the fourteenth century.",
    ),
    P(
        "Summarize these meeting notes, including who is doing what.",
        "Meeting notes, Tuesday: The team reviewed last month's support tickets. Ticket volume rose 12 percent, mostly because of login problems after the app update. Marco will work with engineering to add a clearer error message on the login screen. Dana proposed a new help article on resetting passwords; everyone agreed, and she'll draft it by next week. We discussed hiring a part-time support agent for weekends but decided to wait until the end of the quarter to look at the budget. Next meeting is in two weeks.",
        after=True,
    ),
    P(
        "Can you summarize this paragraph in one sentence?",
        "Octopuses are among the most intelligent invertebrates. They can solve puzzles, open jars, and escape from tanks, and some have been seen carrying coconut shells to use as portable shelters. Unlike humans, most of an octopus's neurons are not in its brain but in its eight arms, which can taste and touch independently. Octopuses also change color and texture in a fraction of a second, using special skin cells to blend into rocks, sand, or coral. Despite these abilities, they live short lives; many species survive only one or two years, and females usually die soon after their eggs hatch.",
    ),
    P(
        "Please summarize the key findings of this survey.",
        "A survey of 2,000 office workers found that employees who worked from home at least two days a week reported higher job satisfaction than those who came to the office every day. However, the same group also said they felt less connected to their coworkers and were less sure about their chances of promotion. Managers in the survey were split: about half believed productivity had improved with remote work, while the other half thought it had declined. The authors suggest that companies offering hybrid schedules should make an extra effort to include remote staff in meetings and to set clear criteria for promotions.",
        after=True,
    ),
    P(
        "Summarize this recipe in a few short steps.",
        "This lentil soup is an easy weeknight meal. Start by softening a chopped onion, two carrots, and two celery stalks in olive oil for about ten minutes. Add three cloves of garlic, a teaspoon of cumin, and a teaspoon of smoked paprika, and stir for one minute. Pour in a cup of rinsed red lentils, a can of chopped tomatoes, and about a liter of vegetable stock. Simmer for twenty-five minutes until the lentils fall apart. Finish with a squeeze of lemon juice and a handful of spinach, and season with salt and pepper. It keeps well in the fridge for up to four days.",
    ),
    P(
        "Summarize this news story for me.",
        "The city council voted 7 to 2 on Monday to build protected bike lanes along Harbor Avenue, one of the busiest streets downtown. Supporters argued that the lanes would reduce accidents, pointing to three cyclist injuries on the avenue in the past year. Several business owners opposed the plan because it will remove about forty parking spaces. To address their concerns, the city will add a new short-term parking area on a side street and allow deliveries in the early morning. Construction is expected to begin in the spring and take about four months.",
    ),
    P(
        "What's this letter about? Give a quick summary.",
        "Dear Sam, it's been far too long since I last wrote. Life here has been busy in a good way. The garden finally produced tomatoes this year after three failed attempts, and I've been giving them away to anyone who stands still long enough. Work is fine, though my manager is retiring and nobody knows who will replace her. The biggest news is that Elena and I are planning a trip to Portugal in October, and we'd love to stop in Lisbon to see you if you're around. Let me know what dates might work. Write back when you can. Love, June",
        after=True,
    ),
    P(
        "Summarize the causes and responses described here in two or three sentences.",
        "Honeybee colonies in many parts of the world have suffered heavy losses over the past two decades. Scientists do not blame a single cause. Instead, they point to a combination of factors: parasitic mites that weaken bees and spread viruses, pesticides that can impair bees' navigation, poor nutrition caused by large fields of a single crop, and stress from long-distance transport of hives for pollination. Beekeepers have adapted by treating hives for mites more often and splitting colonies to replace losses. Some farmers are also planting strips of wildflowers between fields to give bees a more varied diet.",
    ),
    P(
        "Write a one-sentence summary of this recall notice.",
        "The company is recalling about 40,000 electric kettles sold between January and August because the handle can come loose while the kettle is full, creating a risk of burns. Seven incidents have been reported, including two minor injuries. The affected models have the numbers KT-200 and KT-210 printed on the bottom. Customers should stop using the kettles immediately and contact the company for a free replacement or a full refund. Kettles sold after August include a redesigned handle and are not part of the recall.",
        after=True,
    ),
    P(
        "Briefly summarize the passage below.",
        "On July 20, 1969, the Apollo 11 lunar module, called Eagle, landed on the Moon's Sea of Tranquility. Neil Armstrong and Buzz Aldrin spent about two and a half hours outside the module, collecting rock samples, taking photographs, and setting up experiments, including a reflector that let scientists measure the distance between Earth and the Moon with lasers. Meanwhile, Michael Collins orbited above in the command module, Columbia. The landing was nearly aborted because of computer alarms and low fuel, but Armstrong steered the craft manually to a safe spot. The three astronauts returned to Earth on July 24, splashing down in the Pacific Ocean.",
    ),
    P(
        "Summarize this announcement in 2 sentences for a newsletter.",
        "We're excited to introduce shared lists, our most requested feature this year. Starting today, you can invite family members or roommates to any shopping list, and everyone will see changes in real time. Items can be assigned to a specific person, and the app will send a notification when someone checks something off. Shared lists work on both phones and the web version. The feature is free for all users, though premium subscribers can share with up to twenty people instead of five. To get started, open a list, tap the share icon, and enter your friend's email address.",
    ),
    P(
        "Summarize this short story in one or two sentences.",
        "When the power went out during the storm, Biscuit slipped through the back gate and vanished into the dark. The Martinez family searched the neighborhood until midnight, calling his name and shaking his treat bag. The next morning they printed flyers and posted in every local group online. By evening, there was still no sign of him. Then, just as they were sitting down to dinner, the neighbor's son knocked on the door. He had found Biscuit asleep in his family's garden shed, curled up on a pile of old blankets, completely dry and very hungry.",
        after=True,
    ),
    P(
        "Summarize this explanation for a teenager.",
        "Compound interest means you earn interest not only on the money you originally saved, but also on the interest that money has already earned. For example, if you put $1,000 in an account that pays 5 percent per year, you have $1,050 after one year. In the second year, you earn 5 percent on $1,050, not just on the original $1,000, giving you $1,102.50. Over short periods the difference is small, but over decades it becomes large. This is why financial advisors often encourage people to start saving early, even if they can only afford small amounts at first.",
    ),
    P(
        "Summarize the main rules in this policy as a short list.",
        "Starting next month, employees may work remotely up to three days per week, subject to their manager's approval. Remote days must be agreed upon at least one week in advance and recorded in the shared team calendar. Employees working remotely are expected to be reachable during core hours, 10 a.m. to 3 p.m., and to attend all scheduled meetings by video. Equipment such as monitors and keyboards may be borrowed from the office with a signed form. The policy will be reviewed after six months based on feedback from staff and managers.",
        after=True,
    ),
    P(
        "Summarize this game recap.",
        "The Riverside Hawks came back from a twelve-point deficit to beat the Lakeview Bears 78-74 on Saturday night. The Bears led for most of the game thanks to strong three-point shooting in the first half. In the fourth quarter, however, the Hawks switched to a full-court press, forcing six turnovers in the final five minutes. Guard Keisha Moore scored eleven of her 24 points in that stretch, including the go-ahead basket with forty seconds left. The win moves the Hawks into second place in the conference, one game behind the undefeated Central Tigers.",
    ),
    P(
        "Summarize the problem and the solutions mentioned.",
        "Every year, millions of tons of plastic enter the oceans, much of it carried by rivers from cities and farmland. Large pieces such as bottles and fishing nets can entangle or be swallowed by turtles, seabirds, and whales. Over time, sunlight and waves break plastic into tiny fragments called microplastics, which are now found everywhere from the deep sea to Arctic ice. Scientists are still studying how microplastics affect marine life and people who eat seafood. Efforts to reduce the problem include bans on single-use bags, better waste collection in coastal areas, and devices that capture trash in rivers before it reaches the sea.",
        after=True,
    ),
    P(
        "Give me a brief summary of this biography.",
        "Born in a small village in 1921, Marta Kowal taught herself piano on an out-of-tune instrument in the local church. At sixteen she won a scholarship to study in the capital, where her teachers were surprised by both her talent and her unusual habit of writing melodies on the backs of train tickets. During the war, her music school closed, and she spent years working in a textile factory while composing at night. After the war she became known for short, folk-inspired piano pieces, and later for film scores. She continued composing until her death at 89, leaving behind more than three hundred works.",
    ),
    P(
        "Summarize what this customer wants in one sentence.",
        "Hello, I'm writing about order #48213, which I placed on May 2. The tracking page has said 'in transit' for eleven days, and the delivery estimate has passed. I contacted your chat support twice; the first agent said it would arrive within two days and the second said the package might be lost, but neither offered a solution. I need the item, a birthday present, by May 20. Could you either confirm when it will arrive or send a replacement with express shipping? If neither is possible, I'd like a full refund. Thank you, Daniel Okafor",
        after=True,
    ),
    P(
        "Summarize this in simple language.",
        "Cities are often several degrees warmer than the surrounding countryside, an effect known as the urban heat island. Dark surfaces like asphalt and rooftops absorb sunlight during the day and release heat slowly at night, while buildings block wind that would otherwise cool streets. Cars, air conditioners, and factories add extra heat. The effect is strongest on calm, clear nights and can make heat waves more dangerous, especially for older people. Cities are responding by planting trees, painting roofs in light colors, and creating green roofs covered with plants, all of which help keep temperatures down.",
    ),
    P(
        "Summarize this travel blog post in a couple of sentences.",
        "We arrived in the mountain town just after sunset, tired from a six-hour bus ride along narrow roads. The guesthouse owner greeted us with hot tea and insisted we try his wife's dumplings before going to bed. The next morning we hiked to a waterfall about an hour from town. The trail was steep and muddy in places, but the view from the top, with clouds drifting through the valley below, made every step worth it. In the afternoon we wandered through the market, where we bought handwoven scarves and far too many dried apricots. We left two days later, already planning to come back.",
        after=True,
    ),
    P(
        "Summarize the advantages and disadvantages described in this text.",
        "Electric cars have become much more common over the past decade, helped by falling battery prices and government incentives. They produce no exhaust emissions while driving, and they are usually cheaper to run than gasoline cars because electricity costs less than fuel and electric motors need less maintenance. However, electric cars still tend to cost more to buy, and drivers in some areas worry about finding charging stations on long trips. The environmental benefit also depends on how the electricity is produced: a car charged from coal power is cleaner than a gasoline car, but less so than one charged from solar or wind.",
    ),
    P(
        "Summarize this newsletter for a busy parent.",
        "Dear families, this Friday is our annual Science Fair. Students in grades three through six will present their projects in the gym from 1 to 3 p.m., and parents are warmly invited to attend. Please remember that projects must be brought to school on Thursday afternoon so teachers can set up tables. Anything involving open flames or live animals needs approval from Mr. Chen in advance. Lunch will be served as usual. We are also looking for two or three parent volunteers to help judge; if you can help, please reply to this email by Wednesday.",
        after=True,
    ),
    P(
        "Summarize this passage.",
        "Dr. Lena Ortiz had spent three years trying to grow crystals in zero gravity, and every experiment had failed. On her last week aboard the space station, she made one small change, lowering the temperature by two degrees, almost as an afterthought. When she checked the sample the next morning, the chamber was filled with perfect, needle-like crystals, clearer than anything grown on Earth. She had no time to repeat the experiment before her return flight. Back home, she spent months convincing the agency to fund one more mission so she could prove it wasn't luck.",
    ),
    P(
        "Summarize both sides of this debate in a neutral way.",
        "Economists have argued for decades about the effects of raising the minimum wage. Supporters say higher wages help low-income workers pay for basic needs, reduce reliance on public assistance, and can boost local spending. Critics worry that businesses, especially small ones, may respond by hiring fewer workers, cutting hours, or raising prices. Research results are mixed: some studies of moderate increases find little effect on employment, while others suggest that very large increases could lead to job losses in regions where wages are generally low. Many economists therefore argue that the right level depends on local living costs.",
        after=True,
    ),
    P(
        "Summarize these tips.",
        "If your laptop battery drains faster than it used to, there are a few things to check before replacing it. First, open the battery settings to see which apps use the most power; web browsers with many open tabs are common culprits. Lowering screen brightness and turning off keyboard backlighting can also make a big difference. Make sure your operating system is up to date, since updates often include power-saving fixes. Finally, most laptops have a built-in battery health report. If it shows that the battery holds less than about 70 percent of its original capacity, a replacement is probably worth it.",
    ),
    P(
        "Give a two-sentence summary.",
        "A team of paleontologists has discovered the nearly complete skeleton of a small, feathered dinosaur in a quarry in northern China. The animal, about the size of a crow, lived roughly 125 million years ago. Its fossil is unusual because it preserved not only bones but also impressions of feathers and the contents of its stomach, which included the remains of a small lizard. The researchers believe the dinosaur could glide short distances between trees but probably could not fly by flapping. They say the find adds to evidence that feathers evolved for several purposes, such as warmth and display, before they were used for flight.",
        after=True,
    ),
    P(
        "Summarize this email in three short bullet points.",
        "Hi everyone! Thanks to all who came to the photography walk last Sunday; we had a record eighteen people. Some great shots are already in the shared album, so please add yours by the end of the week. Next month we're trying something different: a night photography session at the old pier. Bring a tripod if you have one, and dress warmly. We'll meet at 7:30 p.m. by the ticket office. Finally, our member Rosa has offered to run a short workshop on editing photos on your phone. If you're interested, reply and let me know which weekend suits you.",
    ),
    P(
        "Summarize this study and its limitations.",
        "In a small study, 60 adults with high stress levels were split into two groups. One group practiced ten minutes of guided breathing exercises each morning for eight weeks, while the other group did not change their routine. At the end of the study, the breathing group reported lower stress and slightly better sleep, and their average resting heart rate dropped by about three beats per minute. The researchers caution that the study was short and relied partly on self-reported data, so larger trials are needed before drawing firm conclusions.",
        after=True,
    ),
    P(
        "Summarize this historical passage.",
        "In September 1666, a fire broke out in a bakery on Pudding Lane in London. Strong winds and dry weather helped it spread quickly through the crowded streets, where most houses were built of wood and pitch. The fire burned for four days and destroyed more than 13,000 homes, 87 churches, and St Paul's Cathedral. Surprisingly, the official death toll was very low, though historians believe many deaths went unrecorded. After the disaster, new building rules required houses to be made of brick or stone, and the architect Christopher Wren designed a new St Paul's Cathedral, which still stands today.",
    ),
    P(
        "What happens in this passage? Summarize it briefly.",
        "My grandmother never used a recipe. She measured flour with a chipped teacup and salt with the palm of her hand, and when I asked how long to knead the dough, she said, 'Until it feels right.' For years I thought she was being difficult. After she died, I tried to make her bread from memory and failed again and again. The loaves were flat, then dense, then burnt. Then one afternoon, without thinking, I stopped kneading at the moment the dough felt soft and springy, like an earlobe. The bread that came out of the oven smelled exactly like her kitchen.",
        after=True,
    ),
    P(
        "Summarize these release notes for users in plain language.",
        "Version 3.2 release notes: We've added a dark mode that follows your phone's system setting. The search bar now suggests recent searches and fixes common typos. Photos upload up to twice as fast on slow connections. We fixed a bug where notifications sometimes appeared twice, and another that caused the app to crash when rotating the screen during video playback. Support for phones running operating system versions older than five years has ended; those users can keep using version 3.1 but will not receive new features.",
    ),
    P(
        "Summarize this program description in two or three sentences.",
        "The Green Streets program invites residents to adopt a section of their neighborhood and keep it clean. Volunteers commit to picking up litter at least twice a month and reporting problems such as broken streetlights or illegal dumping through the city's app. In return, the city provides gloves, bags, and grabbers, and places a small sign with the volunteer's or group's name on their section. Since the program started two years ago, more than 300 people have signed up, and the city reports a 20 percent drop in litter complaints in participating areas.",
        after=True,
    ),
    P(
        "Summarize this for a 10-year-old.",
        "Deep below the ocean surface, where sunlight never reaches, animals have evolved remarkable ways to survive. Many produce their own light through a chemical reaction called bioluminescence, using it to attract prey, find mates, or confuse predators. The anglerfish, for example, dangles a glowing lure in front of its mouth. Food is scarce at these depths, so many creatures have huge mouths and stretchy stomachs that let them eat whatever they encounter. Pressure is hundreds of times greater than at the surface, yet animals like the snailfish thrive there thanks to flexible bodies and special proteins that protect their cells.",
    ),
    P(
        "Summarize the key details of this event.",
        "The annual Harvest Festival returns to Oak Park on October 12 and 13. This year's event features more than sixty local vendors selling produce, crafts, and baked goods, along with live music on two stages. Children can enjoy a pumpkin-carving tent, pony rides, and a corn maze that is larger than last year's. A pie-baking contest will be held Sunday at noon; entries must be registered by October 5. Admission is free, but parking costs $5 per car, with proceeds going to the town's youth sports league. Shuttle buses will run from the train station every twenty minutes.",
        after=True,
    ),
    P(
        "What is the main message of this article? Summarize it.",
        "Many adults believe it is too late to learn a new language, but research suggests otherwise. While children usually achieve a more native-like accent, adults often learn grammar and vocabulary faster in the early stages because they can use strategies, study deliberately, and draw on their knowledge of other languages. The biggest factors in success tend to be consistent practice, exposure to real conversation, and motivation. Short daily sessions are generally more effective than occasional long ones, and speaking with others, even with mistakes, speeds up progress more than studying alone.",
    ),
    P(
        "Summarize this excerpt in two sentences.",
        "Captain Iris Vale had commanded the cargo ship Meridian for eleven uneventful years, hauling grain and machinery between the outer colonies. Then, two days out from port, the navigation system picked up a distress signal from a vessel that had been reported destroyed a decade earlier. Her crew argued about whether to answer it: the engineer thought it was a trap set by pirates, while the young pilot insisted they had a duty to help. Iris listened to both, studied the signal, and noticed something odd. The message was addressed to her by name.",
        after=True,
    ),
    P(
        "Summarize this advice in one or two sentences.",
        "Sitting for long periods has been linked to a higher risk of heart disease, diabetes, and back pain, even in people who exercise regularly. Experts recommend breaking up sitting time every 30 to 60 minutes by standing, stretching, or walking for a few minutes. Simple habits can help: taking phone calls while standing, using a timer as a reminder to move, or walking to talk to a colleague instead of sending a message. Standing desks can be useful, but standing still all day has its own problems, so the goal is to change position often rather than to avoid sitting completely.",
    ),
    P(
        "Summarize this business news in plain terms.",
        "Brightline Foods reported revenue of $320 million for the second quarter, up 8 percent from the same period last year. Growth came mainly from its frozen meals line, which expanded into two new countries. Profits, however, fell slightly because of higher costs for packaging and transportation. The company said it expects these costs to stabilize later in the year and kept its annual forecast unchanged. It also announced plans to open a new distribution center in the south of the country, which will create about 200 jobs.",
        after=True,
    ),
    P(
        "Summarize this exhibit description.",
        "The city museum's new exhibit, 'Threads of Time', traces the history of clothing in the region over five centuries. Visitors begin with hand-spun wool garments worn by farmers in the 1500s and move through silk gowns, factory-made work clothes, and wartime uniforms, ending with modern sportswear. Each room includes objects visitors can touch, such as samples of fabric and old sewing tools. One highlight is a wedding dress from 1890 that was remade three times by later generations of the same family. The exhibit runs until the end of January, and entry is included with regular museum admission.",
    ),
    P(
        "Summarize this tale and state its moral.",
        "Long ago, a farmer found a talking fish in his net. The fish begged to be released and promised to grant him any wish. The farmer asked only for rain, because his fields were dry. The rain came, and his crops grew tall. The next year his wife said, 'Go back and ask for gold.' He did, and the fish gave it. The following year she wanted a palace, and then to rule the whole land. Each time the fish agreed. But when she asked to control the sun and the sea, the fish swam away without a word, and the farmer returned home to find his old hut and his dry fields waiting for him.",
        after=True,
    ),
    P(
        "Summarize this talk abstract in one sentence.",
        "In this talk, we describe how our small engineering team reduced the time to deploy new code from two hours to twelve minutes. We began by measuring each step of the pipeline and found that most of the delay came from running the full test suite, much of which tested code that had not changed. By splitting tests by module and running only the affected ones, plus running independent steps in parallel, we cut test time by 80 percent. We also share mistakes we made along the way, including an early attempt at caching that caused hard-to-reproduce failures.",
    ),
    P(
        "Give me a short summary of how to compost based on this.",
        "Composting turns food scraps and yard waste into rich soil that plants love. To start, choose a shady spot and build a pile or use a bin. Mix 'green' materials, such as vegetable peels, coffee grounds, and grass clippings, with 'brown' materials, such as dry leaves, cardboard, and straw. A rough balance of one part green to two or three parts brown works well. Keep the pile about as damp as a wrung-out sponge and turn it every week or two to add air. Avoid meat, dairy, and oily foods, which attract pests. In two to six months, you'll have dark, crumbly compost.",
        after=True,
    ),
    P(
        "Summarize the arguments for and against the four-day week.",
        "Supporters of a four-day work week argue that it can make employees happier and more productive. In several trials, companies that reduced working time without cutting pay reported that output stayed the same or even improved, while staff took fewer sick days. Workers said they had more time for family, exercise, and rest. Critics point out that the model does not suit every job: hospitals, shops, and emergency services need people available every day, and some employees found that compressing their work into fewer days increased stress. Most experts agree that the results are promising but depend heavily on the type of work.",
    ),
    P(
        "Summarize this diary entry.",
        "Day 14 of the sailing trip. The wind finally returned this morning after three days of flat calm, and we covered more distance today than in the whole previous week. Alex caught a tuna, our first real fresh food since the island, and we grilled it for dinner on the deck. The water maker is acting up again; it produces only half the usual amount, so we're rationing showers. Tonight the sky is so clear I can see the Milky Way reflected in the water. If the wind holds, we should reach the coast in about five days.",
        after=True,
    ),
    P(
        "Based on this text, summarize why someone should use a password manager.",
        "A password manager is an app that stores all your passwords in an encrypted vault, protected by one strong master password. Because you no longer have to remember each password, you can use long, random, unique passwords for every site. This matters because when one website is hacked, attackers often try the stolen passwords on other sites. Most password managers can also fill in login forms automatically and warn you when a password has appeared in a known data breach. The main risk is forgetting the master password, so it is important to choose one you can remember and to set up a recovery option.",
    ),
    P(
        "Summarize this in two sentences.",
        "In 1893, New Zealand became the first self-governing country in the world to grant women the right to vote in national elections. The change followed years of campaigning led by Kate Sheppard and others, who organized petitions signed by tens of thousands of women. The final petition, presented to Parliament in 1893, was nearly 300 meters long when its pages were glued together. Although women could vote from that year, they were not allowed to stand for Parliament until 1919, and the first woman was elected in 1933.",
        after=True,
    ),
    P(
        "Summarize this listing in a few bullet points.",
        "Sunny two-bedroom apartment available from September 1. The unit is on the third floor of a quiet building with an elevator and is a five-minute walk from the metro. It has a renovated kitchen with a dishwasher, a small balcony facing the park, and plenty of closet space. Heating and water are included in the rent of $1,450 per month; electricity and internet are extra. Pets are allowed with an additional deposit. The landlord is looking for a tenant who can sign a one-year lease. Viewings are available on weekday evenings and Saturday mornings.",
    ),
    P(
        "Please summarize this text in three sentences or fewer.",
        "Every autumn, billions of birds migrate from their breeding grounds to warmer regions, and many do so at night. Scientists have found that birds use several navigation tools at once. They can sense Earth's magnetic field, use the position of the sun during the day and the stars at night, and recognize landmarks such as coastlines and mountain ranges. Some species also appear to use smell. Young birds on their first migration often rely on an inborn sense of direction, while older birds can correct their course if blown off track, suggesting they learn from experience.",
        after=True,
    ),
    P(
        "Summarize this short scene.",
        "Nadia and Jules had planned the road trip for months, so when the car broke down in a small desert town, Jules blamed Nadia for skipping the oil change. Nadia blamed Jules for insisting on the shortcut. They sat in silence in the only diner while a mechanic looked at the engine. After an hour, the waitress brought them two slices of pie neither had ordered, saying they looked like they needed it. Jules laughed first. By the time the mechanic came back with good news, they were planning which detour to take next.",
    ),
    P(
        "Summarize the main points about fiber.",
        "Dietary fiber is the part of plant foods that the body cannot fully digest. There are two main types. Soluble fiber, found in oats, beans, and apples, dissolves in water to form a gel that can help lower cholesterol and steady blood sugar. Insoluble fiber, found in whole grains, nuts, and vegetable skins, adds bulk and helps food move through the digestive system. Most adults eat far less fiber than recommended. Increasing intake gradually and drinking enough water can help avoid discomfort such as bloating.",
        after=True,
    ),
    P(
        "Summarize the restrictions in simple terms.",
        "Due to below-average rainfall this spring, the county has introduced stage-two water restrictions effective immediately. Lawn watering is now limited to two days per week, before 8 a.m. or after 7 p.m., with even-numbered addresses watering on Tuesdays and Saturdays and odd-numbered addresses on Wednesdays and Sundays. Washing cars at home is permitted only with a bucket or a hose fitted with a shut-off nozzle. Filling swimming pools requires a permit. Residents who break the rules may receive a warning followed by fines. The restrictions will be reviewed at the end of next month.",
    ),
    P(
        "Summarize the reviewer's opinion.",
        "The film tells the story of a retired chess champion who agrees to coach a troubled teenager from her neighborhood. The premise is familiar, and the script follows the expected path, with the usual training montage and a big final tournament. What lifts the movie is the lead performance: the actress plays the champion as prickly and funny rather than wise and gentle, and her scenes with the young co-star feel genuinely unpredictable. The second half drags a little, and a subplot about a real estate developer goes nowhere. Still, it is a warm, well-acted film worth seeing.",
        after=True,
    ),
    P(
        "Summarize this explanation in one sentence.",
        "A steel ship weighs thousands of tons, yet it floats. The reason is buoyancy. When an object is placed in water, it pushes some water out of the way. The water pushes back with a force equal to the weight of the water that was displaced. A solid block of steel sinks because it displaces only a small amount of water compared with its weight. A ship, however, is shaped like a huge hollow bowl, so it displaces an enormous volume of water, and the weight of that water is greater than the weight of the ship. If the hull fills with water, the ship loses this advantage and sinks.",
    ),
    P(
        "What do I need to know from this email? Summarize it.",
        "Reminder: open enrollment for next year's health and dental benefits runs from November 1 to November 15. If you want to keep your current plan, you don't need to do anything. If you want to change plans, add a family member, or sign up for the new vision coverage, you must log in to the benefits portal before the deadline. Changes cannot be made later in the year unless you have a qualifying life event, such as marriage or the birth of a child. HR will hold two information sessions, on November 3 and November 8 at noon, in the main conference room.",
        after=True,
    ),
    P(
        "Summarize this discovery in two sentences.",
        "Archaeologists excavating a Roman-era site in southern Spain uncovered a well-preserved bakery, including three ovens, a stone mill, and storage jars that still held traces of grain. Coins found nearby date the building to the second century. The researchers were particularly excited by a small room that contained children's toys, such as clay marbles and a wooden spinning top, suggesting that the baker's family lived above or beside the shop. The team plans to analyze the grain residue to learn what kinds of bread were baked there.",
    ),
    P(
        "Summarize the story and describe its tone.",
        "On her first day as a teacher, Grace arrived an hour early, arranged the desks three different ways, and rewrote her name on the board twice. When the students came in, they ignored her carefully planned icebreaker and spent ten minutes arguing about a football match. Her lesson on fractions ended with a student asking whether pizza counted as math. That evening she almost cried over her lesson plans. But the next morning, the same student left a drawing on her desk: a pizza divided into eighths, labeled carefully, with 'Thanks Miss G' written at the bottom.",
        after=True,
    ),
    P(
        "Summarize this in one short paragraph.",
        "Washing hands with soap is one of the simplest and most effective ways to prevent the spread of infections such as colds, flu, and stomach bugs. Soap works by breaking apart the oily layer that surrounds many germs and helping water wash them away. Health agencies recommend scrubbing all parts of the hands, including between the fingers and under the nails, for at least twenty seconds, about the time it takes to hum 'Happy Birthday' twice. Hand sanitizer with at least 60 percent alcohol is a useful alternative when soap and water aren't available, but it works less well on visibly dirty hands.",
    ),
    P(
        "Summarize this announcement.",
        "The new express rail line between the capital and the coastal city of Porto Verde opens next week, cutting travel time from four hours to just under two. Trains will run every hour from 6 a.m. to 10 p.m., with extra services on weekends during the summer. Tickets booked in advance start at $25, while walk-up fares cost up to $60. The line has been criticized for delays, opening three years later than planned and well over budget, but officials say it will reduce road traffic and attract tourists to the coast.",
        after=True,
    ),
    P(
        "Summarize the advice in this text.",
        "An emergency fund is money set aside to cover unexpected expenses, such as a car repair, a medical bill, or a sudden loss of income. Financial planners commonly suggest saving enough to cover three to six months of essential costs like rent, food, and utilities. That can feel like a huge amount, so it helps to start with a smaller goal, such as $500, and build from there. Keeping the fund in a separate savings account makes it less tempting to spend and still easy to reach when needed. Automatic transfers on payday are one of the easiest ways to grow it.",
    ),
    P(
        "Summarize this passage in two to three sentences.",
        "When wolves were reintroduced to Yellowstone National Park in 1995, after an absence of about seventy years, scientists expected them to reduce the number of elk. What followed was more complicated. Elk numbers did fall, and the elk also changed their behavior, spending less time grazing in open valleys and along rivers. In some areas, willows and aspen trees began to recover, which in turn helped beavers and songbirds. Researchers still debate how much of this change was due to wolves and how much to other factors such as drought, hunting, and bears, but the story has become a famous example of how one species can affect an ecosystem.",
        after=True,
    ),
    P(
        "Summarize these setup steps briefly.",
        "To set up your new router, first unplug your modem and wait thirty seconds. Connect the modem to the router's port labeled WAN using the included cable, then plug in both devices and wait until the router's status light turns solid white, which may take up to three minutes. On your phone or computer, connect to the Wi-Fi network printed on the sticker under the router. Open a browser, and the setup page should appear automatically. Follow the steps to choose a new network name and password. If the light turns orange instead, restart both devices and try again.",
    ),
    P(
        "Summarize the author's argument.",
        "Some people argue that public libraries are outdated now that so much information is online. This view misunderstands what libraries do. Beyond lending books, they offer free internet access to people who lack it at home, help job seekers write résumés, run reading programs for children, and give older residents a place to learn to use technology. They are also one of the few indoor public spaces where anyone can stay without buying something. Cutting library budgets may save a little money in the short term, but it removes a service that many communities depend on.",
        after=True,
    ),
    P(
        "Give me a quick summary of the weekend forecast.",
        "This weekend will start mild and sunny, with highs around 22 degrees Celsius on Saturday and light winds. Clouds will build on Saturday evening ahead of a cold front, which is expected to bring heavy rain and possible thunderstorms overnight into Sunday morning. Some areas could see more than 30 millimeters of rain, and localized flooding is possible on low-lying roads. The rain should clear by Sunday afternoon, but temperatures will drop sharply, with highs of only 13 degrees and a chilly north wind. Next week looks cool and mostly dry.",
    ),
    P(
        "Summarize this text for a general audience.",
        "Antibiotic resistance happens when bacteria change in ways that make the drugs used to kill them less effective. Every time antibiotics are used, the most vulnerable bacteria die first, while those with random mutations that help them survive are left to multiply. Overusing antibiotics, for example taking them for viral infections like colds, or stopping a course early, speeds up this process. Resistant infections are harder and more expensive to treat and can be deadly. Doctors and scientists are responding by prescribing antibiotics more carefully, developing new drugs, and improving hygiene in hospitals.",
        after=True,
    ),
    P(
        "Summarize this letter in one sentence.",
        "Dear Councillor Brooks, I am writing on behalf of residents of Willow Lane regarding the large pothole at the corner with Station Road. It has been there since February and has grown steadily. Two cars have already had tires damaged, and last week a cyclist fell after swerving to avoid it. We reported the problem through the council website three times and received automatic replies, but no repair has been scheduled. We kindly ask that you look into this urgently and let us know when the work will be done. Yours sincerely, Margaret Hill",
    ),
    P(
        "Summarize this passage in one or two sentences.",
        "The summer I turned twelve, my family moved from a busy city apartment to a farmhouse with no neighbors in sight. I hated it at first. There was no internet, the nearest shop was a half-hour drive away, and the silence at night felt enormous. Then my father gave me the job of feeding the chickens every morning, and slowly I started to notice things: the fox tracks in the mud, the way the swallows returned to the barn each evening, the smell of cut hay. By the end of the summer, I no longer wanted to go back.",
        after=True,
    ),
    P(
        "Summarize this in two bullet points: pros and cons.",
        "Cloud storage lets you save files on servers run by a company instead of only on your own device. The main advantages are that you can access your files from anywhere with an internet connection, share them easily, and keep a backup if your computer is lost or damaged. Most services offer some free space and charge a monthly fee for more. On the downside, you depend on the provider's security and on having a reliable connection, and uploading large files can be slow. Many people use a mix of cloud storage and an external hard drive for important files.",
    ),
    P(
        "Summarize this in a couple of sentences.",
        "Diwali, often called the festival of lights, is one of the most important holidays in India and is celebrated by Hindus, Sikhs, Jains, and some Buddhists. It usually falls in October or November and lasts up to five days. Families clean and decorate their homes, light small oil lamps called diyas, and create colorful patterns called rangoli at their doorsteps. The festival celebrates the victory of light over darkness and good over evil, and different communities connect it with different stories. Sharing sweets, exchanging gifts, and fireworks are common parts of the celebration.",
        after=True,
    ),
    P(
        "Summarize this email and tell me what it's asking for.",
        "Hi Jordan, thanks for taking the time to talk with me last week about your team's scheduling challenges. As promised, I've attached a short overview of how our software handles shift swaps and overtime alerts, along with a case study from a retail chain similar in size to yours. Based on what you described, the standard plan should cover your needs, and we can offer a 30-day free trial so your managers can test it with real schedules. Would you be available for a 20-minute demo next Tuesday or Wednesday? Best regards, Lisa",
    ),
    P(
        "Summarize the key facts about Mars from this text.",
        "Mars is the fourth planet from the Sun and is often called the Red Planet because iron oxide, or rust, in its soil gives it a reddish color. It is about half the size of Earth, and a day there lasts just over 24 hours, but a year takes 687 Earth days. Mars has the largest volcano in the solar system, Olympus Mons, which is about two and a half times the height of Mount Everest. The planet's thin atmosphere is mostly carbon dioxide, and temperatures often drop below minus 60 degrees Celsius. Robotic rovers have found strong evidence that liquid water once flowed on its surface.",
        after=True,
    ),
    P(
        "Summarize this news item.",
        "After thirty-two years on the air, the community radio station WKRL will stop broadcasting at the end of the year. The station, run almost entirely by volunteers, became known for its local news, folk music shows, and a call-in program where listeners traded garden advice. Rising costs for its transmitter site and a drop in donations made it impossible to continue, according to the station's board. WKRL will keep its online stream running for now and hopes to return to the airwaves if a new partner can be found.",
    ),
    P(
        "Summarize this story and explain its lesson.",
        "The apprentice had been sweeping the forge floor for six months before the old blacksmith finally handed him a hammer. 'Make a nail,' she said. He made a hundred bent, uneven nails that week, and she threw every one of them into the scrap bin without comment. On the eighth day, he made a nail that was straight and sharp. She looked at it, nodded once, and threw it in the bin too. 'Now make another one just like it,' she said. It was the first time he understood that the skill wasn't making something good, but making it good every time.",
        after=True,
    ),
    P(
        "Summarize the new recycling rules.",
        "Starting in January, the city will collect recycling every week instead of every two weeks. Residents should place clean paper, cardboard, metal cans, and plastic bottles and tubs in the blue bin. Glass must now go in a separate small green box, because broken glass was contaminating paper at the sorting facility. Plastic bags, foam containers, and greasy pizza boxes are not accepted and should go in the trash. Bins must be at the curb by 7 a.m. on collection day with lids closed.",
    ),
    P(
        "Summarize the passage in two sentences.",
        "Iceland sits on the Mid-Atlantic Ridge, where the North American and Eurasian tectonic plates are slowly pulling apart. This makes the island one of the most volcanically active places on Earth, with an eruption on average every few years. The same heat that causes eruptions also provides a major benefit: geothermal energy. Around nine in ten homes in Iceland are heated with hot water from underground, and geothermal plants also generate a significant share of the country's electricity. Naturally heated outdoor pools are a popular part of daily life, even in winter.",
        after=True,
    ),
    T(
        P(
            "Summarize this:",
            "The Eastside Community Garden began five years ago on an empty lot that had collected trash for a decade. A small group of neighbors cleared it over several weekends and persuaded the city to lease them the land for one dollar a year. Today the garden has forty plots, a shared tool shed, and a rainwater collection system. Members pay a small yearly fee and agree to volunteer four hours a month on shared tasks. Extra vegetables are donated to a nearby food bank, which received more than a ton of produce last year.",
        ),
        "Neighbors turned an empty, trash-filled lot into a community garden with forty plots, leased from the city for a dollar a year, and they donate their extra produce to a local food bank.",
        "Can you make it even shorter, like a headline?",
    ),
    T(
        P(
            "Summarize this paragraph in one sentence.",
            "Tea was first drunk in China, where, according to legend, leaves blew into a pot of boiling water in front of an emperor nearly five thousand years ago. For centuries it was used mainly as medicine before becoming an everyday drink. Buddhist monks brought tea to Japan, where it became part of an elaborate ceremony. Dutch and Portuguese traders introduced it to Europe in the 1600s, and in Britain it became so popular that the East India Company later began growing it in India to reduce dependence on Chinese supply. Today tea is the most consumed drink in the world after water.",
        ),
        "Tea originated in China, spread to Japan through Buddhist monks and to Europe through traders in the 1600s, and became so popular in Britain that production began in India; it is now the world's most consumed drink after water.",
        "Now turn that into three bullet points.",
    ),
    T(
        P(
            "Summarize this message from my manager.",
            "Team, as you know, we're moving to the new office on Bay Street at the end of the month. Movers will pack shared equipment on Thursday the 27th, but please pack your own desk items into the labeled boxes by Wednesday evening. Our internet and phones will be down Friday morning while IT sets up the new network, so plan to work from home until noon. The new office has assigned parking; sign up for a spot with reception. We'll have a small welcome lunch there on Monday the 31st. Thanks for your patience during the move!",
        ),
        "The team moves to the Bay Street office at the end of the month: pack your desk by Wednesday evening, work from home Friday morning while IT sets up, sign up for parking with reception, and join the welcome lunch on Monday the 31st.",
        "Rewrite that summary as a checklist.",
    ),
    T(
        P(
            "Please summarize:",
            "Coral reefs get their bright colors from tiny algae that live inside the coral's tissue and provide it with food through photosynthesis. When the water becomes too warm for too long, the coral expels the algae, turning white in a process called bleaching. Bleached coral is not dead, but it is starving and much more likely to die from disease. If temperatures return to normal quickly, the algae can move back in and the reef can recover. However, marine heat waves have become more frequent, giving reefs less time to recover between events.",
        ),
        "Corals turn white, or bleach, when warm water makes them expel the algae that feed them; they can recover if temperatures drop quickly, but more frequent heat waves leave less time for recovery.",
        "Good. Can you explain that to a child in simpler words?",
    ),
    T(
        "Can you summarize an article for me?",
        "Of course! Please paste the article text, and let me know how long you'd like the summary to be.",
        P(
            "Here it is, two sentences please:",
            "Choosing the right running shoe depends less on brand and more on fit and comfort. Experts suggest shopping in the afternoon, when feet are slightly swollen, and bringing the socks you normally run in. There should be about a thumb's width of space between your longest toe and the end of the shoe. Many stores will watch you jog briefly to see how your foot lands, but recent studies suggest that simply choosing the most comfortable shoe is a reliable way to reduce injury risk. Running shoes typically need replacing every 500 to 800 kilometers.",
        ),
    ),
    T(
        "I need help summarizing a paragraph from my history textbook.",
        "Sure, go ahead and share the paragraph.",
        P(
            "Summarize it in one sentence:",
            "The Peace of Westphalia, signed in 1648, ended the Thirty Years' War, a long and destructive conflict in central Europe that began partly as a struggle between Catholic and Protestant states. The agreements recognized the independence of the Dutch Republic and the Swiss Confederation and allowed rulers of the many German states to choose the official religion of their own territory. Historians often describe Westphalia as the beginning of the modern system of sovereign states, in which each country controls its own affairs without outside interference, although some scholars argue this view is exaggerated.",
        ),
    ),
    T(
        P(
            "Summarize this paragraph:",
            "Teenagers need about eight to ten hours of sleep a night, yet most get far less. Part of the reason is biological: during puberty, the body's internal clock shifts later, so teens naturally feel sleepy around 11 p.m. or midnight rather than earlier. Early school start times then force them to wake before their bodies are ready. Studies of schools that moved their start time later, even by thirty minutes, found that students slept more, attended class more often, and were less likely to fall asleep in lessons.",
        ),
        "Teens need 8 to 10 hours of sleep, but their body clocks shift later during puberty, so early school start times leave them short of sleep; schools that started later saw better sleep and attendance.",
        "What would be a good title for this paragraph?",
    ),
    T(
        P(
            "Summarize the feedback.",
            "Feedback from last month's customer service workshop was largely positive. Most participants said the role-playing exercises were the most useful part, especially the scenarios involving angry customers. Several people felt the morning session on company policies was too long and could have been shared as a document instead. Many asked for a follow-up session focused on handling complaints by email and chat, since these now make up most of our contact volume. A few participants mentioned that the room was too cold.",
            after=True,
        ),
        "Participants liked the workshop, especially the role-plays with angry customers, but found the policy session too long, asked for a follow-up on email and chat complaints, and said the room was cold.",
        "Rewrite the summary as a short note to the workshop organizer.",
    ),
    S(
        "You are a concise assistant. Summaries must be no longer than 30 words.",
        P(
            "Summarize this.",
            "The city's bike-sharing program recorded 1.2 million rides last year, double the number from its first year. Most trips were short, under fifteen minutes, and were concentrated around train stations and the university. Electric bikes, introduced last spring, made up 40 percent of rides despite making up only a quarter of the fleet. The operator plans to add 50 new stations in outer neighborhoods this year, responding to complaints that the service mainly benefits people who live downtown.",
            after=True,
        ),
    ),
    S(
        "You summarize documents for busy executives. Use bullet points.",
        P(
            "Summarize this update from procurement:",
            "Our main packaging supplier has informed us that a fire at their factory will halt production for at least six weeks. We currently hold about three weeks of packaging inventory. The procurement team has contacted two alternative suppliers; one can deliver within ten days but at 15 percent higher cost, and the other is cheaper but cannot deliver for a month. Switching suppliers also requires a quick quality check of the new materials. Procurement recommends placing an immediate order with the faster supplier to avoid a gap in production.",
        ),
    ),
    S(
        "You are a helpful assistant for students.",
        P(
            "Summarize this paragraph in my own words for my notes:",
            "The cell is the basic unit of life. All living things are made of one or more cells, and every cell comes from an existing cell. Plant and animal cells share many structures, including a nucleus that holds genetic material, mitochondria that release energy from food, and a cell membrane that controls what enters and leaves. Plant cells also have a rigid cell wall, which gives them shape, and chloroplasts, which capture sunlight for photosynthesis. Animal cells lack these structures, which is one reason animals must eat to get energy.",
        ),
    ),
]

# --- context_qa: an original passage plus a question answerable from it ---

CONTEXT_QA = [
    Q(
        "The Aurora X2 coffee machine has a 1.8-liter water tank and can brew up to ten cups at once. It offers three strength settings: mild, regular, and bold. The machine turns off automatically after 40 minutes to save energy. A built-in timer lets you schedule brewing up to 24 hours in advance. To clean it, run a mix of equal parts water and white vinegar through a full cycle once a month, followed by two cycles of plain water. The carafe and filter basket are dishwasher safe, but the base must never be submerged.",
        "How often should the machine be cleaned, and with what?",
        "cq",
    ),
    Q(
        "Maya left the bakery at 6:15 with a box of croissants for her sister. The bus was late, so she walked the eleven blocks to the hospital where her sister worked as a night nurse. When she arrived, the receptionist told her that her sister had been called into an emergency surgery and would not be free for another hour. Maya left the croissants at the desk with a note that said, 'For the tired hero on the fourth floor.' Then she took the bus, which had finally arrived, back home.",
        "Why did Maya walk to the hospital?",
        "read",
    ),
    Q(
        "The Riverside Community Pool is open from June 1 to September 5. Weekday hours are 11 a.m. to 7 p.m., and weekend hours are 10 a.m. to 8 p.m. Adult admission is $6, children aged 3 to 12 pay $3, and children under 3 enter free. A season pass costs $90 for adults and $45 for children. Lap swimming is available from 7 to 10 a.m. on weekdays for season pass holders only. Children under 10 must be accompanied by an adult at all times.",
        "Can a 9-year-old go to the pool alone? How much would their ticket cost?",
        "after",
    ),
    Q(
        "The giant panda's diet is more than 99 percent bamboo, yet its digestive system is that of a carnivore. Because it cannot digest bamboo efficiently, a panda must eat between 12 and 38 kilograms of it each day, spending up to 14 hours eating. Pandas have a special enlarged wrist bone that works like a thumb, helping them grip bamboo stalks. Wild pandas live in mountain forests in central China, and conservation efforts have helped their numbers grow to roughly 1,800 in the wild.",
        "How many hours a day can a panda spend eating?",
        "based",
    ),
    Q(
        "Our return policy: unworn items can be returned within 30 days of delivery for a full refund to the original payment method. Items marked 'Final Sale' cannot be returned or exchanged. Shoes must be returned in their original box. Return shipping is free for members of our rewards program; other customers pay a $5 fee, which is deducted from the refund. Refunds are processed within five business days after we receive the item.",
        "I'm not a rewards member and I want to return a $40 sweater I haven't worn. How much will I get back?",
        "quote",
    ),
    Q(
        "The Eiffel Tower was built for the 1889 World's Fair in Paris, marking the 100th anniversary of the French Revolution. Designed and built by the company of engineer Gustave Eiffel, it took just over two years to construct and was the tallest man-made structure in the world until 1930. Many artists and writers at the time criticized it as ugly, and it was originally meant to stand for only twenty years. It survived partly because it proved useful as a radio transmission tower.",
        "Why wasn't the Eiffel Tower taken down after twenty years?",
        "cq",
    ),
    Q(
        "Leo has three older sisters: Ana, who is a doctor in Lisbon; Carla, who teaches music at a secondary school; and Beatriz, the youngest of the three, who is studying engineering in Porto. Leo himself works at a bookshop near the river and, on weekends, plays the drums in a band with Carla's husband, Rui. Every December, the whole family meets at their parents' house by the sea, where their father insists on cooking the same fish stew every year.",
        "Who does Leo play in a band with?",
        "read",
    ),
    Q(
        "Meeting schedule for Thursday: 9:00 to 9:30, daily stand-up with the whole team. 10:00 to 11:00, design review with the client (Ana, Tom, and Priya). 11:30 to 12:00, budget check-in (Tom and the finance team). 1:00 to 2:30, workshop on the new reporting tool, optional and open to everyone. 3:00 to 3:30, one-on-one between Priya and her manager. The office closes early at 5:00 for maintenance.",
        "Which meetings does Tom have on Thursday, not counting the optional workshop?",
        "after",
    ),
    Q(
        "Honey never truly spoils if it is stored properly. Its low water content and high acidity make it hard for bacteria and mold to grow. Bees also add an enzyme that produces small amounts of hydrogen peroxide, which further protects it. Over time, honey may crystallize and become cloudy or grainy, but this is a natural process and does not mean it has gone bad. Gently warming the jar in a bowl of warm water will return it to a liquid state.",
        "Is crystallized honey safe to eat? What can you do about it?",
        "based",
    ),
    Q(
        "The Lumen desk lamp has five brightness levels and three color temperatures: warm, neutral, and cool. It charges through a USB-C port and lasts up to 12 hours on the lowest setting, or about 3 hours on the brightest. A full charge takes two and a half hours. The arm folds flat for travel, and the base includes a wireless charging pad for phones. The lamp comes with a two-year warranty and is available in black, white, and sage green.",
        "How long will the lamp last on its brightest setting?",
        "cq",
    ),
    Q(
        "When the storm knocked out power across the island, Mrs. Patel's general store was the only place with a working generator. She opened her doors that evening and let neighbors charge their phones, and she boiled water for anyone who needed it. By the third day, people had started bringing food to share, and the store became a kind of community kitchen. When the power returned a week later, the island council gave her an award, which she hung behind the counter next to her late husband's photo.",
        "What did the store become during the power outage?",
        "read",
    ),
    Q(
        "Mount Kilimanjaro in Tanzania is Africa's highest mountain, reaching 5,895 meters. It is a dormant volcano made up of three cones: Kibo, Mawenzi, and Shira. Climbers can reach the summit without technical climbing equipment, but altitude sickness is a serious risk, and many routes take six to eight days to allow the body to adjust. The glaciers near the summit have shrunk by more than 80 percent over the past century.",
        "Why do many routes up the mountain take six to eight days?",
        "quote",
    ),
    Q(
        "To apply for the summer internship, students must be enrolled in a university and have completed at least two years of study. Applications require a CV, a one-page cover letter, and one reference from a professor. The deadline is March 15. Shortlisted candidates will be invited to a video interview in early April, and final decisions will be sent by April 30. The internship runs for ten weeks from June 9 and pays a weekly stipend of $600.",
        "I'm a first-year university student. Can I apply?",
        "after",
    ),
    Q(
        "Lightning is a giant spark of electricity. Inside a storm cloud, ice particles and water droplets collide, separating positive and negative charges. The negative charges gather at the bottom of the cloud, while the ground below becomes positively charged. When the difference becomes large enough, electricity jumps between them. A lightning bolt heats the air around it to about 30,000 degrees Celsius, five times hotter than the surface of the Sun. The air expands so quickly that it creates a shock wave, which we hear as thunder.",
        "According to the text, what causes thunder?",
        "cq",
    ),
    Q(
        "Banana pancakes (makes 8): 2 ripe bananas, 2 eggs, 150 grams of flour, 200 milliliters of milk, 1 teaspoon of baking powder, a pinch of salt, and butter for the pan. Mash the bananas, whisk in the eggs and milk, then stir in the flour, baking powder, and salt until just combined. Cook spoonfuls of batter in a buttered pan over medium heat for about two minutes per side, and serve warm with yogurt or honey.",
        "How much milk do I need if I want to make 16 pancakes?",
        "based",
    ),
    Q(
        "Ravi started his job at the city zoo in 2015 as a ticket seller. Two years later, he became an assistant in the reptile house, where he discovered a love for snakes. In 2020 he went back to school part-time to study biology, and after graduating he was promoted to head reptile keeper. He now also gives talks to school groups every Friday afternoon, and he says the question children ask most often is whether snakes are slimy.",
        "What job did Ravi have when he first started at the zoo?",
        "read",
    ),
    Q(
        "The Pinewood Trail is a 7-kilometer loop that usually takes about two and a half hours to complete. The first half climbs steadily through pine forest to a viewpoint over the lake, and the second half descends along a stream. The trail is rated moderate. Dogs are allowed on a leash. There is no drinking water along the route, so hikers should bring their own. In winter, the upper section can be icy, and the park recommends boots with good grip.",
        "Should I bring water on the Pinewood Trail? Why?",
        "cq",
    ),
    Q(
        "The Brennan family's annual reunion will be held on Saturday, July 19, at Lakeview Park, pavilion B. Lunch starts at 12:30; each household is asked to bring one side dish or dessert. Uncle Frank will handle the grill and provide burgers and veggie patties. There will be a three-legged race and a softball game in the afternoon. If it rains, everything moves to Aunt Rosa's house on Cedar Street. Please confirm attendance with Carol by July 10.",
        "What should each household bring, and who should they tell that they're coming?",
        "after",
    ),
    Q(
        "In 1928, Alexander Fleming returned from vacation to find that one of his bacteria cultures had been contaminated by a mold. Around the mold, the bacteria had died. He identified the mold as Penicillium and named the bacteria-killing substance penicillin. However, Fleming struggled to produce it in large amounts, and it wasn't until the early 1940s that a team at Oxford, led by Howard Florey and Ernst Chain, developed methods to purify it. Mass production during World War II saved thousands of soldiers' lives.",
        "Who developed methods to purify penicillin?",
        "quote",
    ),
    Q(
        "Clara's apartment building on Linden Street has four floors and no elevator, which her friends complain about whenever they visit. The ground floor is a laundromat that stays open until midnight. Clara lives on the second floor, in the apartment with the green door. Mr. Adeyemi, a retired pilot who grows tomatoes on his balcony, lives on the floor directly above her. The Chen family, who have three young children, live on the top floor.",
        "Which floor does Mr. Adeyemi live on?",
        "read",
    ),
    Q(
        "Hydroponics is a method of growing plants without soil. Instead, the roots sit in water that contains dissolved nutrients, sometimes supported by materials like clay pebbles or coconut fiber. Because the nutrients are delivered directly to the roots, plants often grow faster, and they can use up to 90 percent less water than in traditional farming, since the water is recirculated. The main drawbacks are the cost of equipment and the need to monitor nutrient levels and pH carefully, as problems can spread quickly through the shared water.",
        "What are the drawbacks of hydroponics mentioned in the passage?",
        "cq",
    ),
    Q(
        "Note from the landlord: Water will be shut off in the building on Tuesday from 9 a.m. to 1 p.m. while plumbers replace the main valve. Please store some water in advance if you need it. The elevator will also be out of service from 10 a.m. to 11 a.m. that day for its yearly inspection. We apologize for the inconvenience. Contact the building manager at extension 204 with any questions.",
        "Will I be able to take a shower at noon on Tuesday?",
        "after",
    ),
    Q(
        "The violinist Elena Marsh was born in Glasgow in 1984 and began playing at the age of four. She studied at the Royal Academy of Music in London and won the Sibelius Competition at 22. She has recorded eleven albums, including a complete set of Bach's solo sonatas that won a major award in 2016. She plays a violin made in 1721 that is on loan from a private foundation. Marsh lives in Vienna with her husband, a cellist, and their two children.",
        "How old was Elena Marsh when she won the Sibelius Competition, and roughly what year was that?",
        "based",
    ),
    Q(
        "Octavia, a small software company, offers three plans. The Basic plan costs $8 per user per month and includes 10 GB of storage. The Team plan costs $15 per user per month, includes 100 GB of storage, and adds shared calendars. The Enterprise plan has custom pricing, unlimited storage, and a dedicated support manager. All plans come with a 14-day free trial, and paying annually gives a 20 percent discount.",
        "How much would the Team plan cost per month for 5 users, paying monthly?",
        "cq",
    ),
    Q(
        "The ancient city of Petra, in modern-day Jordan, was built by the Nabataeans, who carved many of its buildings directly into pink sandstone cliffs. The city became wealthy by controlling trade routes for incense and spices. The Nabataeans were also skilled engineers: they built dams, channels, and cisterns to collect and store rainwater, allowing a large population to live in the desert. After trade routes shifted and earthquakes damaged the city, Petra was gradually abandoned.",
        "How did the people of Petra get enough water?",
        "read",
    ),
    Q(
        "Tom wanted to surprise his wife on their anniversary, so he booked a table at the restaurant where they had their first date. Unfortunately, when they arrived, they found that the restaurant had become a shoe store. Tom was embarrassed, but his wife laughed so hard she had to sit down. They ended up buying sandwiches from a food truck and eating them on a bench in the park, and she later said it was the best anniversary they'd ever had.",
        "Why couldn't they eat at the restaurant?",
        "quote",
    ),
    Q(
        "Jupiter is the largest planet in the solar system, more than eleven times wider than Earth. It is a gas giant made mostly of hydrogen and helium and has no solid surface. Its Great Red Spot is a storm larger than Earth that has been raging for well over a century. Jupiter has dozens of known moons; the four largest, Io, Europa, Ganymede, and Callisto, were discovered by Galileo in 1610. Ganymede is the largest moon in the solar system and is even bigger than the planet Mercury.",
        "Which moon is bigger than Mercury?",
        "after",
    ),
    Q(
        "Employees are entitled to 25 days of paid vacation per year, plus public holidays. Up to five unused days may be carried over into the next year, but they must be used by March 31 or they will be lost. Vacation requests of more than five consecutive days must be submitted at least four weeks in advance. Sick leave is separate from vacation and requires a doctor's note after three consecutive days of absence.",
        "If I have 8 unused vacation days at the end of the year, how many can I keep?",
        "cq",
    ),
    Q(
        "The Oakridge Library's book club meets on the first Wednesday of every month at 7 p.m. in the upstairs reading room. This season's books are 'The Salt Road' in September, 'A Winter in Krakow' in October, and 'Small Engines' in November. There is no meeting in December because of the holidays. Copies are available to borrow from the front desk two weeks before each meeting. New members are always welcome, and no registration is needed.",
        "Is there a book club meeting in December?",
        "based",
    ),
    Q(
        "Sea otters spend almost their entire lives in the water. Unlike most marine mammals, they have no layer of blubber; instead, they stay warm thanks to the densest fur of any animal, with up to a million hairs per square inch. Sea otters eat sea urchins, crabs, and clams, and they often use rocks as tools to crack open shells while floating on their backs. By eating sea urchins, which graze on kelp, otters help protect kelp forests.",
        "How do sea otters stay warm without blubber?",
        "read",
    ),
    Q(
        "Dear Mr. Alvarez, thank you for your application for the position of warehouse supervisor. We were impressed by your experience and would like to invite you to an interview on Monday, May 12, at 2 p.m. at our main office, 45 Harbor Road. The interview will last about one hour and will include a short practical task. Please bring a form of photo ID and copies of any forklift certifications. Kindly confirm your attendance by replying to this email by May 8.",
        "What should Mr. Alvarez bring to the interview?",
        "after",
    ),
    Q(
        "Bread rises because of yeast, a tiny fungus. When yeast is mixed with flour and water, it feeds on sugars in the flour and produces carbon dioxide gas and alcohol. Kneading develops gluten, a stretchy network of proteins that traps the gas bubbles, causing the dough to expand. During baking, the heat kills the yeast, the alcohol evaporates, and the gas bubbles expand further before the bread's structure sets.",
        "What is the role of gluten in making bread?",
        "cq",
    ),
    Q(
        "Five friends lined up for a group photo at the lake, and the photographer asked them to stand in order of height. Samira is taller than Jonas but shorter than Petra. Petra is shorter than Marcus. Jonas is the shortest of the group, and Lucia, who arrived late, is exactly as tall as Samira, so she stood next to her.",
        "Who is the tallest person in the photo?",
        "quote",
    ),
    Q(
        "The Leaning Tower of Pisa began to tilt during its construction in the 12th century because it was built on soft ground made of clay, sand, and shells. Construction was paused for almost a century because of wars, which actually helped: the soil had time to settle, preventing the tower from collapsing. By 1990 the tilt had grown to about 5.5 degrees, and the tower was closed to the public. Engineers removed soil from beneath the higher side, reducing the lean to about 4 degrees, and it reopened in 2001.",
        "How did engineers reduce the tower's lean?",
        "read",
    ),
    Q(
        "Notice to all students: The chemistry lab will be closed from April 14 to April 18 for installation of new ventilation equipment. Lab sessions scheduled for that week will be moved online, and instructors will post video demonstrations and worksheets on the course page. Students who need access to equipment for final projects should contact Dr. Okonkwo to arrange time in the biology lab. Regular lab sessions will resume on April 21.",
        "Where can students work on their final projects during the closure?",
        "based",
    ),
    Q(
        "The lighthouse keeper's log for March 3 read simply: 'Fog. Ship sighted at 4 a.m., no lights.' His daughter Nell found the entry twenty years later, long after the lighthouse had been automated. Curious, she searched old newspapers and discovered that on March 4 of that year, a fishing boat had been found drifting empty off the coast, its crew never identified. The keeper had never mentioned it to anyone, not even to her mother.",
        "What did Nell discover in the old newspapers?",
        "cq",
    ),
    Q(
        "Aspirin is related to a compound found in willow bark, which people had used for thousands of years to ease pain and fever. In 1897, chemists at the German company Bayer created a more stable and less irritating form called acetylsalicylic acid. It was sold as a powder at first and later as a tablet. Decades afterwards, researchers discovered that low doses of aspirin reduce the blood's ability to clot, which is why doctors sometimes prescribe it to lower the risk of heart attacks.",
        "What natural source is aspirin linked to?",
        "after",
    ),
    Q(
        "Setting up the Orbit smart thermostat: First, turn off power to your heating system at the breaker. Remove the old thermostat and label the wires using the stickers provided. Attach the Orbit base plate and connect the wires to the matching terminals. Snap the display onto the base and restore power. The thermostat will start a setup wizard; connect it to your Wi-Fi network and download the Orbit app to finish. If the display stays blank, check that the C-wire is connected.",
        "What should I check if the display stays blank?",
        "read",
    ),
    Q(
        "Marcus and his sister Jade run a food truck that sells Caribbean food. Marcus does the cooking, using recipes from their grandmother, while Jade handles the money, the social media, and finding locations. On Mondays the truck stays closed so they can shop for ingredients. Their most popular dish is jerk chicken with rice and peas, but Jade's favorite is the fried plantain, which she says reminds her of childhood visits to Jamaica.",
        "Why is the truck closed on Mondays?",
        "quote",
    ),
    Q(
        "The Great Pacific Garbage Patch is a large area of the North Pacific Ocean where floating debris collects because of circular ocean currents called gyres. Despite its name, it is not a solid island of trash. Most of it consists of tiny pieces of plastic that are spread throughout the water, making the patch hard to see from ships or satellites. Estimates suggest it covers an area about three times the size of France, although its boundaries change with the currents.",
        "Is the Great Pacific Garbage Patch a solid island of trash?",
        "cq",
    ),
    Q(
        "Train 412 departs Central Station at 8:05 and stops at Millfield at 8:22, Ashbury at 8:40, and Northgate at 9:02, arriving at the airport at 9:25. Train 418 departs Central at 8:35 and runs express, stopping only at Northgate at 9:15 before reaching the airport at 9:35. On Sundays, Train 418 does not run, and Train 412 runs fifteen minutes later than its weekday times.",
        "It's Sunday. What time will Train 412 arrive at Ashbury?",
        "after",
    ),
    Q(
        "The museum's policy on photography: Visitors may take photos without flash in all permanent galleries. Photography is not allowed in temporary exhibitions unless a sign says otherwise, because many objects are on loan from other institutions. Tripods and selfie sticks are not permitted anywhere in the building. Filming for commercial purposes requires written permission from the press office. Photos may be shared on social media, and we encourage visitors to tag the museum.",
        "Can I use a selfie stick in the permanent galleries?",
        "based",
    ),
    Q(
        "Jin-woo failed his driving test twice. The first time, he forgot to check his mirror before changing lanes; the second time, he rolled through a stop sign. Before his third attempt, his grandmother, who had never driven a car in her life, made him practice saying 'mirror, signal, look' out loud every time he turned. The examiner gave him a strange look when he started muttering, but he passed with only one minor fault.",
        "What mistake did Jin-woo make on his first test?",
        "read",
    ),
    Q(
        "Mangroves are trees that grow in salty coastal waters in the tropics. Their tangled roots, which often rise above the water, slow down waves and trap sediment, protecting shorelines from erosion and storm surges. Mangrove forests also serve as nurseries for many fish species, whose young hide among the roots from predators. In addition, they store large amounts of carbon in their soil. Despite these benefits, mangroves have been cleared in many areas for shrimp farms and coastal development.",
        "List two ways mangroves help coastal areas.",
        "cq",
    ),
    Q(
        "The Student Council election will take place on October 8. Any student in grades 9 to 12 may run for a position, but candidates must collect signatures from at least 25 classmates and submit their forms to Ms. Rivera by September 30. Each candidate may put up no more than five posters, and posters may not be placed in bathrooms or on classroom doors. Speeches will be given at an assembly on October 6 and must be under two minutes.",
        "What's the deadline for submitting candidate forms, and who receives them?",
        "quote",
    ),
    Q(
        "Founded in 1998 in a garage in Lyon, Vela Bikes started by repairing old racing bicycles. In 2005 the company released its first frame, a lightweight steel model called the Corsa, which sold out within weeks. Vela moved into electric bikes in 2016 and now sells about 40,000 bikes a year, mostly in France, Germany, and the Netherlands. The company still offers free lifetime repairs on its steel frames, a tradition started by its founder, Luc Moreau.",
        "What was the name of Vela's first frame, and what was it made of?",
        "after",
    ),
    Q(
        "The Sahara is the largest hot desert in the world, covering much of North Africa. However, it has not always been dry. Between about 11,000 and 5,000 years ago, changes in Earth's orbit brought more rain to the region, turning large parts of it into grassland dotted with lakes. Rock paintings from this period show giraffes, elephants, and cattle. When the climate shifted again, the region dried out, and people moved toward the Nile Valley and other water sources.",
        "What evidence shows that the Sahara was once green?",
        "cq",
    ),
    Q(
        "Patient instructions: Take one tablet twice daily with food, in the morning and in the evening, for ten days. Do not stop taking the medication early, even if you feel better. Avoid alcohol during the treatment. Common side effects include mild nausea and headache. If you develop a rash or difficulty breathing, stop taking the tablets and seek medical help immediately. Store at room temperature, away from direct sunlight.",
        "How many tablets will I take in total over the full course?",
        "read",
    ),
    Q(
        "Ines had been saving for a new laptop for eight months. She worked weekends at her aunt's flower shop and put aside 60 euros each month. When she finally had enough, she went to the store and found that the model she wanted was on sale for 100 euros less than she expected. She bought it, then spent the leftover money on a cake for her aunt, who had given her the job in the first place.",
        "How much money had Ines saved in total before going to the store?",
        "based",
    ),
    Q(
        "Glass is made by heating a mixture of sand, soda ash, and limestone to around 1,500 degrees Celsius until it melts into a thick liquid. The soda ash lowers the melting temperature of the sand, while the limestone makes the finished glass more durable and resistant to water. The molten glass can then be blown, pressed, rolled, or floated on a bath of molten tin to create perfectly flat sheets for windows. Recycled glass, called cullet, is often added because it melts at a lower temperature and saves energy.",
        "Why is limestone added to the mixture?",
        "cq",
    ),
    Q(
        "Rules of the game 'Three Stones': Two players take turns placing stones on a 4-by-4 grid. The first player uses white stones and the second uses black. On each turn, a player must place one stone on any empty square. A player wins by getting three stones in a row horizontally, vertically, or diagonally. If the board fills up with no winner, the player with fewer stones in the corners wins. If that is also tied, the game is a draw.",
        "What happens if the board fills up and nobody has three in a row?",
        "after",
    ),
    Q(
        "The Arctic tern has the longest migration of any animal. Each year it flies from its breeding grounds in the Arctic to the Antarctic and back, a round trip that can exceed 70,000 kilometers because the birds follow winding routes to take advantage of winds. Because it experiences two summers each year, the Arctic tern sees more daylight than any other creature. Over a lifetime of 30 years, one bird may fly a distance equal to three trips to the Moon and back.",
        "Why does the Arctic tern see more daylight than any other animal?",
        "quote",
    ),
    Q(
        "Hi Sofia, just confirming the plan for Saturday. I'll pick you up at 8 so we can beat the traffic to the coast. My brother can't come after all because of work, so it'll just be the four of us: you, me, Hana, and Ben. Hana is bringing the tent and Ben has the cooler. Could you grab some firewood on Friday? We'll be back Sunday around dinner time. Mateo",
        "Who is bringing the tent, and what does Mateo ask Sofia to get?",
        "read",
    ),
    Q(
        "The Voyager 1 spacecraft was launched by NASA in 1977 to study Jupiter and Saturn. After completing its planetary flybys, it kept traveling outward, and in 2012 it became the first human-made object to enter interstellar space. Voyager 1 carries a golden record containing sounds and images from Earth, including greetings in 55 languages, music, and natural sounds like thunder and birdsong. Its instruments are slowly being turned off as its power supply weakens.",
        "When did Voyager 1 enter interstellar space?",
        "cq",
    ),
    Q(
        "The cafe's loyalty program works like this: you get one stamp for every drink you buy, and after ten stamps you receive a free drink of any size. Pastries do not count toward stamps. On Tuesdays, every drink earns two stamps. Stamp cards expire one year after the first stamp. Lost cards cannot be replaced, but customers who use the cafe's app instead of a paper card never lose their stamps.",
        "If I buy one drink every Tuesday and nothing else, how many weeks until I earn a free drink?",
        "based",
    ),
    Q(
        "In the story, Oren is a shy boy who collects old keys. He finds them at flea markets, in the gutters after rain, and in the drawer of his late grandfather's desk. One day a new girl at school, Talia, notices the ring of keys on his backpack and asks what they open. Oren admits he has no idea. Together they decide to spend the summer trying every lock in town, and by the end of the book they have opened a music box, an old post office box, and a garden gate that leads to a forgotten orchard.",
        "What did Oren and Talia manage to open by the end of the book?",
        "after",
    ),
    Q(
        "Tsunamis are usually caused by underwater earthquakes that suddenly move large sections of the sea floor, pushing up the water above. In the open ocean, a tsunami wave may be less than a meter high and travel as fast as a jet plane, so ships may not notice it passing. As the wave approaches shallow water near the coast, it slows down and grows much taller. One warning sign is the sea suddenly pulling back from the shore, exposing the sea floor, which can happen minutes before the wave arrives.",
        "What warning sign of a tsunami does the passage mention?",
        "read",
    ),
    Q(
        "Welcome to the Harbor View Hotel. Breakfast is served in the Terrace Restaurant from 6:30 to 10:00 on weekdays and from 7:00 to 11:00 on weekends. Checkout time is 11 a.m.; late checkout until 2 p.m. can be requested at the front desk for a fee of $30, subject to availability. The fitness center on the second floor is open 24 hours with your room key. The rooftop pool is open from 8 a.m. to 9 p.m., weather permitting.",
        "Until what time is breakfast served on Sunday?",
        "cq",
    ),
    Q(
        "The word 'quarantine' comes from the Italian 'quaranta giorni', meaning forty days. In the 14th century, during outbreaks of plague, the city of Venice required ships arriving from infected ports to wait at anchor for forty days before passengers and goods could come ashore. Earlier, the port of Ragusa, now Dubrovnik, had used a thirty-day isolation period. The practice spread to other ports across Europe and became a standard public health measure.",
        "What does the word quarantine originally mean, and which city used a thirty-day period?",
        "quote",
    ),
    Q(
        "After the flood destroyed the town's old bridge, the children of Elm Falls had to take a forty-minute bus ride around the river to reach school instead of a five-minute walk. A group of students started a campaign, writing letters to the regional government and collecting signatures at the farmers' market. Their teacher helped them present their case at a public meeting. Eighteen months later, a new footbridge opened, and the town invited the students to cut the ribbon.",
        "How did the students campaign for a new bridge?",
        "based",
    ),
    Q(
        "The Pomodoro Technique is a time management method developed by Francesco Cirillo in the late 1980s. You choose a task, set a timer for 25 minutes, and work until it rings. Then you take a short break of about five minutes. Each 25-minute session is called a 'pomodoro', named after the tomato-shaped kitchen timer Cirillo used as a student. After four pomodoros, you take a longer break of 15 to 30 minutes.",
        "How long is the break after four pomodoros?",
        "after",
    ),
    Q(
        "Growing tomatoes: Plant seedlings outdoors after the last frost, when nights stay above 10 degrees Celsius. Choose a spot that gets at least six to eight hours of sun. Water deeply two or three times a week rather than a little every day, and water the soil rather than the leaves to prevent disease. Add a stake or cage at planting time so you don't damage the roots later. Pick the fruit when it is fully colored and slightly soft to the touch.",
        "Why should you water the soil instead of the leaves?",
        "cq",
    ),
    Q(
        "Amara moved from Lagos to Toronto in January, the coldest month of the year. On her first day, she wore three sweaters under her coat and still shivered at the bus stop. Her new coworker, Greg, laughed and took her to a store to buy proper winter boots and a parka. By March she was walking to work even on snowy days. She still complains about the cold, but she has started to enjoy skating on the frozen pond near her apartment on weekends.",
        "What did Greg do to help Amara?",
        "read",
    ),
    Q(
        "The skeleton of an adult human contains 206 bones, but babies are born with around 270. Many of a baby's bones are partly made of cartilage, which gradually hardens and fuses together during childhood and adolescence. For example, the skull starts as several separate plates with soft spots between them, which allows the head to pass through the birth canal. The largest bone in the body is the femur, or thigh bone, and the smallest is the stapes in the middle ear.",
        "Why do babies have more bones than adults?",
        "quote",
    ),
    Q(
        "Library loans policy: Books are loaned for three weeks and may be renewed twice online if no one else has reserved them. Overdue books are charged 25 cents per day, up to a maximum of $10 per item. DVDs are loaned for one week and charged $1 per day when overdue. Children's books have no overdue fines. Members with more than $20 in unpaid fines cannot borrow new items until the balance is reduced.",
        "I returned a DVD 4 days late. How much do I owe?",
        "after",
    ),
    Q(
        "The team behind the fitness app Stride surveyed 500 of their users. Most said they opened the app mainly to track their daily steps, while only a small fraction used its meal planner. Users aged over 50 were the most likely to use the app every day. The most requested new feature was a way to compete with friends. Based on the results, the team decided to remove the meal planner and focus on social features in the next version.",
        "What feature will the team remove, and why?",
        "based",
    ),
    Q(
        "The Wright brothers, Orville and Wilbur, made the first controlled, powered airplane flight on December 17, 1903, near Kitty Hawk, North Carolina. The first flight, piloted by Orville, lasted 12 seconds and covered 37 meters. They made four flights that day, and the longest, flown by Wilbur, lasted 59 seconds and covered about 260 meters. The brothers had previously run a bicycle shop, and they used skills from bicycle building to design lightweight parts for their aircraft.",
        "Who piloted the longest flight that day, and how far did it go?",
        "cq",
    ),
    Q(
        "Noor opened her bakery with just two ovens and one employee, her cousin Faisal. The first year was hard: the oven broke twice and a new supermarket across the street sold cheaper bread. Noor decided to focus on the things the supermarket couldn't offer, such as cardamom buns, custom birthday cakes, and bread made from local grain. By the third year, there was a line out the door every Saturday morning, and she had hired four more people.",
        "How did Noor compete with the supermarket?",
        "read",
    ),
    Q(
        "Caffeine works by blocking adenosine, a chemical that builds up in the brain during the day and makes us feel sleepy. Because caffeine fits into the same receptors as adenosine, the brain doesn't receive the 'tired' signal. Its effects usually begin within 15 to 45 minutes and can last several hours; caffeine has a half-life of about five hours in healthy adults, meaning half of it is still in your body five hours after you drink it. This is why a late-afternoon coffee can make it harder to fall asleep.",
        "If I drink a coffee at 4 p.m., roughly how much of the caffeine is still in my body at 9 p.m.?",
        "after",
    ),
    Q(
        "Announcement: The annual charity run will take place on Sunday, May 4, starting at 9 a.m. from City Hall. Participants can choose between a 5-kilometer and a 10-kilometer route. Registration costs $20 for adults and $10 for students, and every runner receives a T-shirt. All money raised will go to the children's hospital. Water stations will be placed every 2.5 kilometers. Road closures will be in effect along Main Street from 8 a.m. to noon.",
        "Where does the race start, and where does the money go?",
        "quote",
    ),
    Q(
        "Chess is generally traced back to India around the sixth century, to a game called chaturanga, whose pieces represented parts of an army: infantry, cavalry, elephants, and chariots. The game spread to Persia, where it became known as shatranj, and then to the Islamic world and Europe. In medieval Europe, the rules slowly changed. Around the late 15th century, the queen, previously one of the weakest pieces, became the most powerful, and the bishop gained its long diagonal movement, making the game much faster.",
        "What change happened to the queen in the late 15th century?",
        "cq",
    ),
    Q(
        "Your subscription includes four meal kits per week, each serving two people. You can skip a week at any time, as long as you do so before midnight on Wednesday for the following delivery. Deliveries arrive on Saturdays between 8 a.m. and 6 p.m. Boxes are insulated and keep food cold for up to 12 hours after delivery. To cancel your subscription, go to Account Settings and select 'Cancel plan'; cancellations take effect after the next scheduled delivery.",
        "By when do I need to skip if I don't want a delivery this coming Saturday?",
        "based",
    ),
    Q(
        "Kai was the only person in his family who couldn't swim. At family beach trips he sat on the sand and built castles while his cousins raced each other through the waves. When he turned fifteen, he secretly signed up for lessons at the community pool, where most of the other beginners were six years old. He kept going for three months. That summer, he walked into the sea, swam out to the buoy, and waved at his astonished family.",
        "How old were most of the other beginners in Kai's swimming class?",
        "read",
    ),
    Q(
        "Wind turbines turn the energy of moving air into electricity. The wind pushes the blades, which spin a shaft connected to a generator. Most large turbines have three blades and can rotate to face the wind. They start generating power at wind speeds of about 3 to 4 meters per second and shut down automatically in very strong winds, above about 25 meters per second, to avoid damage. Offshore wind farms are often more productive than onshore ones because winds at sea are stronger and more constant.",
        "Why do turbines shut down in very strong winds?",
        "after",
    ),
    Q(
        "Kiran's weekly schedule: on Monday and Wednesday, swimming practice from 5 to 6:30 p.m.; on Tuesday, a piano lesson at 4 p.m.; Thursday is free; on Friday, math tutoring from 3:30 to 4:30 p.m.; on Saturday morning, a soccer game, with the time changing each week. Sunday is family day. Kiran's mother has asked that homework be finished before any evening activity.",
        "Which weekday afternoon does Kiran have nothing scheduled?",
        "cq",
    ),
    Q(
        "Moths are often confused with butterflies, but there are some simple differences. Most butterflies fly during the day, while most moths are active at night. Butterflies usually rest with their wings folded up over their backs, whereas moths tend to rest with their wings spread flat or folded like a tent. Butterfly antennae are thin with a small club at the tip, while moth antennae are often feathery or saw-edged. There are far more species of moths than butterflies.",
        "How can you tell a moth from a butterfly by looking at its antennae?",
        "quote",
    ),
    Q(
        "Grandpa Walt kept a jar of buttons on the kitchen windowsill. Every button came with a story: the brass one from his army coat, the red one from the dress Grandma wore on their first date, the tiny pearl one from my mother's christening gown. When I was seven, I lost the red button in the garden, and I cried for an hour. Grandpa said the story was still safe because I remembered it, and then he told it to me again.",
        "Which button did the narrator lose, and where did it come from?",
        "based",
    ),
    Q(
        "To renew a passport by mail, adults need to send the completed renewal form, their most recent passport, one recent color photo, and the fee of $130 by check or money order. The old passport must have been issued within the last 15 years and when the applicant was at least 16 years old. Routine processing takes six to eight weeks; expedited service costs an extra $60 and takes two to three weeks. Applicants whose name has changed must include a copy of the marriage certificate or court order.",
        "How much would I pay in total for an expedited renewal?",
        "cq",
    ),
    Q(
        "The koala spends up to 20 hours a day sleeping or resting. This is largely because of its diet: eucalyptus leaves are low in nutrients and contain compounds that are toxic to most animals. Koalas have a long digestive organ called a caecum, which contains bacteria that help break down the tough leaves. Even so, the leaves provide little energy, so koalas conserve it by moving as little as possible. A koala gets most of the water it needs from the leaves, which is why it rarely drinks.",
        "Why do koalas rarely drink water?",
        "read",
    ),
    T(
        Q(
            "The Westside Community Center offers a beginner pottery class on Tuesday evenings from 6 to 8 p.m. The eight-week course costs $160, which includes clay, glazes, and firing. Class size is limited to ten students. Participants will learn hand-building techniques in the first four weeks and use the pottery wheel in the second half. Aprons are provided, but students should wear clothes that can get dirty. Registration opens on August 1.",
            "How much does the course cost?",
            "cq",
        ),
        "The eight-week course costs $160, and that includes clay, glazes, and firing.",
        "And when do students start using the wheel?",
    ),
    T(
        Q(
            "Anna flew from Madrid to Oslo on Friday morning for her cousin's wedding. Her suitcase didn't arrive with her, so she had to borrow a dress from her cousin's sister for the rehearsal dinner. The airline delivered the suitcase to her hotel on Saturday afternoon, just two hours before the ceremony. After the wedding, Anna stayed an extra three days to hike in the mountains before flying home on Wednesday.",
            "Why did Anna borrow a dress?",
            "read",
        ),
        "Because her suitcase didn't arrive on her flight, so she had nothing to wear to the rehearsal dinner.",
        "When did she get her suitcase back?",
    ),
    T(
        Q(
            "A total solar eclipse happens when the Moon passes directly between the Sun and Earth, completely covering the Sun's bright face. For a few minutes, the sky darkens, stars may become visible, and the Sun's outer atmosphere, the corona, appears as a glowing ring. Total eclipses are visible only along a narrow path, usually less than 200 kilometers wide. Outside that path, people see a partial eclipse. It is never safe to look directly at the Sun during the partial phases without special eclipse glasses.",
            "What is the corona?",
            "after",
        ),
        "The corona is the Sun's outer atmosphere. During a total eclipse it appears as a glowing ring around the Moon.",
        "Is it safe to look at a partial eclipse without glasses?",
    ),
    T(
        Q(
            "House rules for Maple Court residents: Quiet hours are from 10 p.m. to 7 a.m. every day. Bicycles must be stored in the basement bike room, not in hallways. Trash goes in the bins behind the building; recycling is collected on Thursdays. Guests may stay for up to two weeks without notifying management. Barbecues are allowed in the courtyard but not on balconies. Pets are permitted, but dogs must be on a leash in shared areas.",
            "Can I grill on my balcony?",
            "based",
        ),
        "No. Barbecues are only allowed in the courtyard, not on balconies.",
        "What about keeping my bike in the hallway outside my door?",
    ),
    T(
        Q(
            "At the wedding reception, the best man, Omar, realized the ring box in his pocket was empty. He quietly searched the car, the hotel room, and the church while the guests ate dinner. Finally, the groom's six-year-old niece admitted she had taken the ring to show her doll, and she had hidden it in her shoe for safekeeping. The ceremony had already happened with a ring borrowed from the bride's grandmother, so the real ring was handed over during the speeches, to loud applause.",
            "Who took the ring?",
            "cq",
        ),
        "The groom's six-year-old niece took it to show her doll and hid it in her shoe.",
        "So what ring did they use during the ceremony?",
    ),
    T(
        "I'm going to give you a paragraph, and then ask a question about it.",
        "Sounds good. Please share the paragraph and your question.",
        Q(
            "Mount Vesuvius, near the Bay of Naples in Italy, erupted in the year 79 CE, burying the Roman towns of Pompeii and Herculaneum under volcanic ash and pumice. The ash preserved buildings, paintings, and even loaves of bread, giving archaeologists an extraordinary picture of daily Roman life. Excavations at Pompeii began in the 1700s and continue today. Vesuvius is still active; its last eruption was in 1944, and hundreds of thousands of people live in the surrounding danger zone.",
            "When was Vesuvius's most recent eruption?",
            "after",
        ),
    ),
    T(
        Q(
            "The XR-5 phone comes with a one-year limited warranty covering manufacturing defects such as faulty buttons, screen flickering, or battery failure under normal use. The warranty does not cover accidental damage, such as cracked screens or water damage, nor damage caused by unauthorized repairs. Customers can buy an extended protection plan within 60 days of purchase; it adds a second year of coverage and includes up to two accidental damage repairs for a $49 fee each.",
            "Does the standard warranty cover a cracked screen?",
            "read",
        ),
        "No. The standard one-year warranty only covers manufacturing defects; accidental damage like a cracked screen is not included.",
        "What would cover it, then?",
    ),
    T(
        Q(
            "Mei planned her vegetable garden carefully this spring. She put tomatoes and peppers along the south fence, where they would get the most sun, and planted lettuce and spinach in the shadier corner by the shed, since they prefer cooler conditions. Beans went next to the corn so they could climb the stalks. She left one bed empty to plant garlic in the autumn, and she lined the paths with marigolds to keep pests away.",
            "Where did Mei plant the lettuce?",
            "quote",
        ),
        "She planted the lettuce, along with the spinach, in the shadier corner by the shed, because they prefer cooler conditions.",
        "What is the empty bed for?",
    ),
    S(
        'Answer the question using only the provided context. If the answer is not in the context, say "I don\'t know."',
        Q(
            "The Fernhill Farmers' Market runs every Saturday from 8 a.m. to 1 p.m. in the parking lot behind the town hall, from April through October. More than thirty vendors sell fruit, vegetables, cheese, honey, bread, and flowers. Live music starts at 10 a.m., and there is a free children's craft table every first Saturday of the month. Vendors accept cash, and most also accept cards. Dogs on short leashes are welcome.",
            "How much does a jar of honey cost at the market?",
            "cq",
        ),
    ),
    S(
        "You are a reading-comprehension assistant. Quote the sentence from the passage that supports your answer.",
        Q(
            "Coffee is believed to have originated in the highlands of Ethiopia. According to a popular legend, a goat herder named Kaldi noticed that his goats became unusually energetic after eating red berries from a certain shrub. By the 15th century, coffee was being grown in Yemen, where Sufi monks drank it to stay awake during night prayers. Coffee houses soon spread to Cairo, Istanbul, and later Europe, where they became popular places for conversation and news.",
            "Why did Sufi monks drink coffee?",
            "read",
        ),
    ),
    S(
        "You are a customer support assistant for Nimbus Internet. Use the policy text the customer provides.",
        "Policy: Nimbus customers can pause their internet service for up to three months per year, for example while traveling. A paused account is charged $5 per month to keep the phone number and email address active. Pauses must be requested at least three days before they start. Equipment should stay connected during the pause so that it continues to receive updates.\n\nI'm going abroad for two months starting next week. What will I pay while I'm away?",
    ),
]

# --- code: write, explain or fix short Python / JavaScript / SQL / bash ---

CODE = [
    "Write a Python function that checks whether a string is a palindrome.",
    "How do I reverse a list in Python?",
    "Write a SQL query to find the total sales per customer from a table `orders(customer_id, amount)`.",
    "What does this JavaScript code print?\n\n```js\nconst a = [1, 2, 3];\nconst b = a.map(x => x * 2);\nconsole.log(b);\n```",
    "Fix the bug in this Python code:\n\n```python\ndef average(nums):\n    return sum(nums) / len(nums\n```",
    "Write a bash command to count the number of lines in all .txt files in the current directory.",
    "Explain what a Python list comprehension is, with an example.",
    "Write a JavaScript function that returns the largest number in an array.",
    "How do I read a CSV file in Python using the csv module?",
    "What is the difference between `==` and `===` in JavaScript?",
    "Write a Python function to count how many times each word appears in a sentence.",
    "Explain this SQL query:\n\n```sql\nSELECT name, COUNT(*) AS n\nFROM employees\nGROUP BY name\nHAVING COUNT(*) > 1;\n```",
    "Why does this code give an IndexError?\n\n```python\nitems = [10, 20, 30]\nfor i in range(len(items) + 1):\n    print(items[i])\n```",
    "Write a bash script that prints 'Hello' followed by the first argument passed to it.",
    "How do I remove duplicates from a list in Python while keeping the order?",
    "Write a recursive Python function that returns the factorial of a number.",
    "What does `git stash` do?",
    "Convert this for loop to a list comprehension:\n\n```python\nsquares = []\nfor n in range(10):\n    if n % 2 == 0:\n        squares.append(n * n)\n```",
    "Write a SQL query that returns the 5 most expensive products from a `products` table with columns `id`, `name`, and `price`.",
    "How do I make an HTTP GET request in JavaScript using fetch?",
    "Explain what this bash command does: `find . -name '*.log' -mtime +7 -delete`",
    "Write a Python class called `BankAccount` with deposit and withdraw methods. Withdrawals should not allow the balance to go below zero.",
    "What's the difference between a tuple and a list in Python?",
    "Write a JavaScript function that capitalizes the first letter of each word in a string.",
    "This function should return True only for prime numbers, but it says 4 is prime. What's wrong?\n\n```python\ndef is_prime(n):\n    for i in range(2, n // 2):\n        if n % i == 0:\n            return False\n    return True\n```",
    "How can I merge two dictionaries in Python?",
    "Write a SQL query to find all customers who have never placed an order. Tables: `customers(id, name)` and `orders(id, customer_id, total)`.",
    "What is a closure in JavaScript? Give a short example.",
    "Write a Python script that prints the numbers from 1 to 100, but prints 'Fizz' for multiples of 3, 'Buzz' for multiples of 5, and 'FizzBuzz' for multiples of both.",
    "How do I sort a list of dictionaries by a key in Python? For example, sort people by age.",
    "Write a bash one-liner to find the 10 largest files in a directory tree.",
    "What does the `async` keyword do in JavaScript?",
    "Explain the difference between `INNER JOIN` and `LEFT JOIN` in SQL.",
    "Write a Python function that takes a list of numbers and returns only the even ones.",
    "What will this print, and why?\n\n```python\nx = [1, 2, 3]\ny = x\ny.append(4)\nprint(x)\n```",
    "Write a function in JavaScript to check if two strings are anagrams.",
    "How do I handle a file-not-found error when opening a file in Python?",
    "Write a regular expression that matches a simple email address like name@example.com, and show how to use it in Python.",
    "How do I create a virtual environment in Python and install packages into it?",
    "Write a SQL statement to create a table called `books` with an id, title, author, and year published.",
    'Explain what `if __name__ == "__main__":` means in Python.',
    "Write a bash loop that renames all .jpeg files in a folder to .jpg.",
    "What's wrong with this JavaScript? It prints 3 three times instead of 0, 1, 2.\n\n```js\nfor (var i = 0; i < 3; i++) {\n  setTimeout(() => console.log(i), 100);\n}\n```",
    "Write a Python function that converts a temperature from Celsius to Fahrenheit.",
    "How do I get today's date in Python and format it as YYYY-MM-DD?",
    "Write a SQL query to count how many employees work in each department, sorted from largest to smallest. Table: `employees(id, name, department)`.",
    "Write a JavaScript snippet that adds a click event listener to a button with the id `submit` and shows an alert.",
    "What is the time complexity of looking up a key in a Python dictionary?",
    "Write a Python function that returns the nth Fibonacci number using a loop.",
    "Explain what this Python code does:\n\n```python\nresult = {k: v for k, v in zip(names, scores) if v >= 50}\n```",
    "How do I check which process is using port 8080 on Linux?",
    "Write a Python function that flattens a nested list like [1, [2, [3, 4]], 5].",
    "What's the difference between `let`, `const`, and `var` in JavaScript?",
    "Write an UPDATE query that increases the price of all products in the 'books' category by 10 percent.",
    'Why is my Python code printing `None`?\n\n```python\ndef greet(name):\n    print("Hello, " + name)\n\nprint(greet("Ana"))\n```',
    "Write a Python program that asks the user for their age and tells them how many years until they turn 100.",
    "How do I split a string by commas in JavaScript and trim the spaces around each item?",
    "Write a bash script that checks if a file exists and prints a message either way.",
    "Explain recursion to a beginner using a simple Python example.",
    "Write a Python function that checks whether a password is at least 8 characters long and contains a digit.",
    "What does this SQL return?\n\n```sql\nSELECT AVG(salary) FROM employees WHERE hire_date >= '2020-01-01';\n```",
    "Rewrite this Python function to be more readable:\n\n```python\ndef f(l):\n    r=[]\n    for i in l:\n        if i not in r:r.append(i)\n    return r\n```",
    "How do I convert a JSON string to a JavaScript object?",
    "Write a Python script that reads a text file and prints its longest line.",
    "Briefly, what is the difference between `git merge` and `git rebase`?",
    "Write a debounce function in JavaScript.",
    "Write Python code that downloads a web page with the requests library and prints the status code.",
    "Explain what a primary key is in a database.",
    'I get `TypeError: can only concatenate str (not "int") to str` in Python. What does it mean and how do I fix it?',
    "Write a Python generator that yields the squares of the numbers from 1 to n.",
    "Write a bash command to replace every occurrence of 'foo' with 'bar' in a file called config.txt.",
    "Write a JavaScript function that returns a new array with duplicate values removed.",
    "Write a SQL query to find the second highest salary in the `employees` table.",
    "How do I use `enumerate` in Python? Show an example.",
    "Write pytest unit tests for a function `add(a, b)` that returns the sum of two numbers.",
    "What does this regex match? `^\\d{3}-\\d{4}$`",
    "Write a short Python function that counts the vowels in a string.",
    "Explain the difference between a process and a thread.",
    "How do I pretty-print a dictionary as JSON in Python?",
    "Write a JavaScript function that checks whether a year is a leap year.",
    "Write a SQL query joining `students(id, name)` and `grades(student_id, course, grade)` to list each student's name with their grades.",
    T(
        "Write a Python function that adds two numbers.",
        "```python\ndef add(a, b):\n    return a + b\n```",
        "Now add type hints and a docstring.",
    ),
    T(
        "How do I read a file line by line in Python?",
        'You can loop over the file object:\n\n```python\nwith open("data.txt") as f:\n    for line in f:\n        print(line.strip())\n```',
        "How would I skip empty lines?",
    ),
    T(
        "Write a SQL query to get all users from the `users` table.",
        "```sql\nSELECT * FROM users;\n```",
        "Only the ones who signed up in 2023, ordered by name. The table has a `created_at` column.",
    ),
    T(
        "What is a Python dictionary?",
        'A dictionary is a built-in data type that stores key-value pairs, like `{"apple": 3, "banana": 5}`. You look up values by key, for example `d["apple"]`.',
        "How do I loop over both keys and values?",
    ),
    T(
        "Write a JavaScript function to sum an array of numbers.",
        "```js\nfunction sum(arr) {\n  let total = 0;\n  for (const n of arr) total += n;\n  return total;\n}\n```",
        "Can you rewrite it using reduce?",
    ),
    T(
        "My bash script says 'permission denied' when I run it.",
        "That usually means the file isn't executable. You can fix it with `chmod +x script.sh` and then run it with `./script.sh`.",
        "What does the +x actually change?",
    ),
    T(
        "Write a function that checks if a number is even in Python.",
        "```python\ndef is_even(n):\n    return n % 2 == 0\n```",
        "Make it work for a whole list and return only the even numbers.",
    ),
    T(
        "What's the difference between a list and a set in Python?",
        "A list keeps items in order and allows duplicates. A set is unordered and stores each item only once, which makes membership checks fast.",
        "When should I use a set instead of a list?",
    ),
    T(
        "Can you help me with some JavaScript?",
        "Of course! What are you working on?",
        "I want to get the text a user typed into an input box with id `username` when they click a button.",
    ),
    S(
        "You are an expert Python programmer. Reply with code only, no explanation.",
        "Write a function that returns the sum of the digits of an integer.",
    ),
    S("You are a patient programming tutor for beginners.", "What is a variable in programming?"),
    S(
        "You are a senior engineer doing code review. Be brief.",
        "Review this:\n\n```python\ndef get_user(users, id):\n    for u in users:\n        if u['id'] == id:\n            return u\n```",
    ),
]

# --- math: arithmetic word problems, algebra, short proofs, unit conversions ---

MATH = [
    "What is 15% of 240?",
    "A train travels 180 kilometers in 2 hours. What is its average speed?",
    "Solve for x: 3x + 7 = 22.",
    "Convert 5 miles to kilometers.",
    "If a shirt costs $40 and is on sale for 25% off, what is the sale price?",
    "Prove that the sum of two even numbers is always even.",
    "What is the area of a circle with a radius of 6 cm?",
    "Sarah has 3 times as many apples as Tom. Together they have 48 apples. How many does each have?",
    "Simplify: (2x + 3)(x - 4).",
    "How many seconds are there in a day?",
    "A recipe needs 3 cups of flour for 12 cookies. How much flour do I need for 30 cookies?",
    "What is the square root of 144?",
    "Solve the system: x + y = 10 and x - y = 4.",
    "Convert 72 degrees Fahrenheit to Celsius.",
    "What is the next number in the sequence 2, 6, 18, 54, ...?",
    "A rectangle has a perimeter of 36 meters and its length is twice its width. Find its dimensions.",
    "Is 91 a prime number? Explain.",
    "If I save $25 a week, how many weeks will it take to save $1,000?",
    "What is 7/8 as a decimal and as a percentage?",
    "Factor the expression x^2 - 9.",
    "A car uses 6 liters of fuel per 100 km. How much fuel does it need for a 350 km trip?",
    "Calculate 23 × 47 step by step.",
    "What is the probability of rolling a sum of 7 with two six-sided dice?",
    "How many milliliters are in 2.5 liters?",
    "Prove that the square root of 2 is irrational.",
    "A store sells pencils at 3 for $1.20. How much do 10 pencils cost?",
    "Solve: 2(x - 3) = 4x + 8.",
    "What is the least common multiple of 12 and 18?",
    "Three friends split a restaurant bill of $87 and want to leave a 15% tip. How much does each person pay?",
    "Find the slope of the line passing through (2, 3) and (6, 11).",
    "How many feet are in 3.5 meters? Use 1 meter = 3.281 feet.",
    "What is the sum of the interior angles of a hexagon?",
    "A tank holds 500 liters and is being filled at 20 liters per minute. It currently has 140 liters. How long until it's full?",
    "Explain why any nonzero number raised to the power of zero equals 1.",
    "Compute 1 + 2 + 3 + ... + 100 and explain the shortcut.",
    "The ratio of boys to girls in a class is 3:4 and there are 28 students. How many girls are there?",
    "Solve for x: x^2 - 5x + 6 = 0.",
    "What is 0.45 divided by 0.09?",
    "A bike wheel has a diameter of 70 cm. How far does the bike travel in one full rotation?",
    "How many minutes are in 3 hours and 45 minutes?",
    "Show that the product of any two odd numbers is odd.",
    "A population of bacteria doubles every hour. If there are 500 bacteria now, how many will there be after 5 hours?",
    "What is the greatest common divisor of 84 and 126?",
    "John is 4 years older than his sister. In 6 years, the sum of their ages will be 40. How old are they now?",
    "Add 3/5 + 1/4 and write the result as a single fraction.",
    "A phone costs $600 after a 20% discount. What was the original price?",
    "What is the volume of a cube with sides of 4 cm?",
    "How many kilograms is 150 pounds?",
    "Evaluate 2^10.",
    "A worker earns $18 per hour and works 37.5 hours a week. What is their weekly pay?",
    "In a right triangle, the legs are 9 and 12. How long is the hypotenuse?",
    "What is the average of 12, 15, 20, 22 and 31?",
    "Solve the inequality 5 - 2x > 11.",
    "A bag has 4 red, 5 blue, and 6 green marbles. What is the probability of drawing a blue marble?",
    "Expand (a + b)^2 and explain each term.",
    "If $2,000 is invested at 5% simple interest per year, how much interest is earned in 3 years?",
    "How many square meters is a room that measures 4.2 m by 3.5 m?",
    "Round 3.14159 to two decimal places and explain the rule.",
    "A movie starts at 7:40 p.m. and lasts 2 hours and 35 minutes. What time does it end?",
    "Prove that if n is odd, then n^2 is odd.",
    "What is 3/4 of 2/3?",
    "Convert 1,500 meters to kilometers and to miles.",
    "A cyclist rides 6 km uphill at 12 km/h and comes back down the same road at 24 km/h. What is the average speed for the round trip?",
    "Find x if 4^x = 64.",
    "What is the median of 7, 3, 9, 1, 5, 8?",
    "There are 12 people at a party and everyone shakes hands with everyone else exactly once. How many handshakes are there?",
    "Write 0.000452 in scientific notation.",
    "One painter can paint a room in 6 hours; a second painter can do it in 3 hours. How long will it take if they work together?",
    "What is the derivative of 3x^2 + 2x - 5?",
    "Convert 90 km/h to meters per second.",
    "Is 1,001 divisible by 7? Show your work.",
    "A square garden has an area of 81 square meters. How much fencing is needed to go around it?",
    "Solve for y: y/4 - 3 = 5.",
    "In how many different orders can 4 books be arranged on a shelf?",
    "What is 12.5% of 80, and how can you compute it in your head?",
    "A car's value drops by 10% each year. If it's worth $20,000 now, what will it be worth in two years?",
    "How many cups are in a US gallon?",
    "What is the perimeter of a triangle with sides 5 cm, 7 cm, and 10 cm?",
    "Explain why dividing by zero is undefined.",
    "Anna reads 25 pages per day. Her book has 340 pages. On which day will she finish it?",
    "What is the sum of the first five odd numbers, and what pattern do you notice?",
    T("What is 15 × 12?", "15 × 12 = 180.", "And if I divide that by 9?"),
    T(
        "Solve 2x + 4 = 10.",
        "Subtract 4 from both sides: 2x = 6. Divide by 2: x = 3.",
        "Can you check the answer by substituting it back in?",
    ),
    T(
        "How many centimeters are in an inch?",
        "One inch is exactly 2.54 centimeters.",
        "So how tall is someone who is 5 feet 9 inches, in centimeters?",
    ),
    T(
        "What's the area of a rectangle that is 8 m by 5 m?",
        "The area is 8 × 5 = 40 square meters.",
        "If tiles cost $12 per square meter, how much will it cost to tile it?",
    ),
    T(
        "I have a math question about percentages.",
        "Sure, go ahead! What's the question?",
        "My rent went from $1,200 to $1,290. By what percent did it increase?",
    ),
    T(
        "What is a prime number?",
        "A prime number is a whole number greater than 1 whose only divisors are 1 and itself, like 2, 3, 5, 7 and 11.",
        "List all the prime numbers between 20 and 50.",
    ),
    T(
        "What's the formula for the area of a triangle?",
        "Area = 1/2 × base × height.",
        "Use it to find the area of a triangle with a base of 10 cm and a height of 7 cm.",
    ),
    T(
        "I'm driving 240 km at 80 km/h.",
        "At 80 km/h, a 240 km trip takes 240 ÷ 80 = 3 hours.",
        "If I leave at 9:15 a.m. and stop for 20 minutes on the way, when do I arrive?",
    ),
    T(
        "What does 'mean' mean in statistics?",
        "The mean is the average: add up all the values and divide by how many there are.",
        "Find the mean of my test scores: 78, 85, 92, 67, and 88.",
    ),
    S(
        "You are a math tutor. Show your reasoning step by step before giving the final answer.",
        "A jacket costs $80. The price goes up 10% and then down 10%. What is the final price?",
    ),
    S("Give only the final numerical answer.", "What is 345 + 678?"),
    S("You are a friendly tutor for a 10-year-old.", "Why is 1/2 the same as 2/4?"),
]

# --- translation: short sentences between English and French / Spanish / German / Italian / Portuguese ---

TRANSLATION = [
    "Translate to French: Where is the nearest train station?",
    'How do you say "I would like a cup of coffee, please" in Spanish?',
    "Translate into German: The meeting has been moved to Thursday afternoon.",
    'Translate this Italian sentence into English: "Domani andiamo al mare con i bambini."',
    'What does "Je ne sais pas quoi faire ce week-end" mean in English?',
    "Translate to Portuguese: My sister is a nurse and works at night.",
    'Translate from Spanish to English: "El perro duerme debajo de la mesa."',
    'Can you translate "Happy birthday, I hope all your wishes come true" into Italian?',
    'Translate into English: "Ich habe meinen Schlüssel im Büro vergessen."',
    "Please translate to Spanish: The museum is closed on Mondays.",
    "Translate this into French: Could you speak a little more slowly, please?",
    'What is "Obrigado pela ajuda, foi muito gentil da sua parte" in English?',
    "Translate to German: I have been learning to play the piano for two years.",
    "Translate into Italian: How much does this bag cost?",
    'English translation please: "Nous avons raté le dernier bus et nous sommes rentrés à pied."',
    'Translate "It\'s raining cats and dogs" into Spanish. Use a natural equivalent, not a word-for-word translation.',
    "Translate to Portuguese: Can I pay by card?",
    'Translate the following German into English: "Wir treffen uns um acht Uhr vor dem Kino."',
    'How would I say "I\'m allergic to peanuts" in French?',
    'Translate from Italian: "Non vedo l\'ora di rivederti."',
    "Translate into Spanish: We need to buy bread, milk, and some fruit.",
    'What does "Wo kann ich hier ein Taxi finden?" mean?',
    "Translate to French: My grandmother grows tomatoes in her garden every summer.",
    "Translate into German: Excuse me, is this seat taken?",
    'Translate "Ela gosta de ler livros antes de dormir" into English.',
    "Translate to Italian: The train to Florence leaves at half past nine.",
    'How do you say "Good luck on your exam tomorrow!" in Portuguese?',
    'Translate from French to English: "Il fait trop chaud pour sortir cet après-midi."',
    "Translate this into Spanish, in a formal tone: Thank you for your quick reply.",
    "Translate into German: The children are playing in the park.",
    'What is the English meaning of "Me duele la cabeza desde esta mañana"?',
    "Translate to French: I forgot my umbrella at the restaurant.",
    "Translate to Portuguese: What time does the pharmacy open?",
    'Translate this Italian menu item into English: "Risotto ai funghi porcini con parmigiano."',
    "Translate into Spanish: Do you know a good place to eat near here?",
    'Translate this German sign into English: "Bitte nicht rauchen."',
    'How would you translate "Welcome to our home" into Italian?',
    "Translate to French: The package should arrive within three working days.",
    'Translate into English: "Estamos muy contentos con el nuevo apartamento."',
    "Translate to German: Could you help me carry these boxes?",
    "Translate into Portuguese: I've never been to Brazil, but I'd love to go.",
    'What does "Ci vediamo più tardi" mean in English?',
    "Translate to Spanish: Turn left at the second traffic light.",
    "Translate into French: Our team won the match by two goals.",
    'Translate the German phrase "Ich verstehe nur Bahnhof" into English and explain what it means.',
    "Translate to Italian: I'm sorry, I don't speak Italian very well.",
    'Translate from Portuguese to English: "O jantar está pronto, venham para a mesa!"',
    "Give me the Spanish translation of: Where can I buy a bus ticket?",
    "Translate into German: My phone battery is almost dead.",
    "Translate to French: She has lived in Montreal since 2015.",
    'Translate "Avez-vous une chambre pour deux personnes ce soir ?" into English.',
    "Translate into Italian: We are looking for a cheap hotel near the center.",
    'How do you say "Please call me back when you can" in Spanish?',
    "Translate to Portuguese: The library closes at six o'clock.",
    'Translate this into English: "Der Zug hat zwanzig Minuten Verspätung."',
    "Translate into French: I'd like to book a table for four people at eight.",
    'Translate from Spanish: "¿Cuánto tiempo se tarda en llegar al aeropuerto?"',
    "Translate to German: We should leave early to avoid the traffic.",
    "Translate into Italian: My favorite season is autumn because of the colors.",
    'What does "Saudades de você" mean in English? Explain the word saudade.',
    "Translate to Spanish: The doctor said I need to rest for a week.",
    'Translate into English: "Mon frère travaille dans une banque à Genève."',
    "Translate to Portuguese: Let's meet at the café on the corner.",
    "Translate into German, informally: Do you want to come to my party on Saturday?",
    'Translate into English: "La cena è servita alle otto in punto."',
    "Translate to French: Don't forget to water the plants while I'm away.",
    "Translate into Spanish: My flight was cancelled because of the snow.",
    'Translate from German: "Kannst du mir bitte das Salz geben?"',
    "Translate to Italian: The keys are on the kitchen table.",
    "Translate into Portuguese: How long have you been living here?",
    'Translate "Buen provecho" into English and tell me when people say it.',
    "Translate to French: Is breakfast included in the price?",
    "Translate into German: I would like to return this jacket; it's too small.",
    "Translate into Spanish: I have two brothers and one sister.",
    'Translate to English: "Quanto custa um bilhete de ida e volta para Lisboa?"',
    "Translate into Italian: Can you recommend a good book?",
    "Translate into French: The weather will be sunny tomorrow, with a light breeze.",
    'How do I ask "Where is the bathroom?" in German?',
    "Translate the following to Spanish: We are going to celebrate my parents' anniversary next weekend.",
    'Translate from Italian to English: "Ho perso il portafoglio sull\'autobus."',
    "Translate this sentence into both French and Spanish: The cat is sleeping on the sofa.",
    'Translate from French into Spanish: "Je voudrais un billet pour Madrid, s\'il vous plaît."',
    'Translate from German into Italian: "Das Wetter ist heute schön."',
    T('Translate "Good morning" into French.', "Bonjour.", 'And how would I say "Good evening"?'),
    T(
        "Translate to Spanish: I am tired.",
        "Estoy cansado. (If you are a woman: Estoy cansada.)",
        'Now say "We are tired, but happy."',
    ),
    T(
        'How do you say "thank you" in German?',
        '"Danke", or, more politely, "Danke schön" or "Vielen Dank".',
        "How do I reply if someone thanks me?",
    ),
    T(
        "Translate into Italian: I love pizza.",
        "Amo la pizza.",
        'How do I say "I love pizza, but I prefer pasta"?',
    ),
    T(
        "I need help translating a message to my host in Portugal.",
        "Happy to help! What would you like to say?",
        'Tell her: "I will arrive on Friday evening, around 7. Thank you for having me."',
    ),
    T(
        'What does "Wie geht\'s?" mean?',
        "It means \"How's it going?\" It's a casual way to ask how someone is in German.",
        "How do I answer that if I'm doing well?",
    ),
    T(
        'Translate "the red car" into Spanish.',
        'El coche rojo. In Latin America you\'ll also hear "el carro rojo" or "el auto rojo".',
        'Now translate "the red cars are fast."',
    ),
    T(
        'How do I say "excuse me" in French?',
        '"Excusez-moi" is the most common. To get past someone in a crowd, you can also say "Pardon."',
        'How would I say "Excuse me, where is the metro?"',
    ),
    T(
        'Translate "Ho fame" from Italian.',
        'It means "I\'m hungry." Literally, "I have hunger."',
        'How would I say "I\'m thirsty" then?',
    ),
    S(
        "You are a professional translator. Provide only the translation.",
        "Translate into German: Our office will be closed on public holidays.",
    ),
    S(
        "You translate between English and Spanish. Keep the tone natural and conversational.",
        "Hey! Long time no see. How have you been?",
    ),
    S("Translate everything the user writes into French.", "I'm going to the market to buy some vegetables."),
]


# --- assembly: ids, split, JSONL ---

SOURCES = {
    "chat": CHAT,
    "writing": WRITING,
    "qa": QA,
    "summarization": SUMMARIZATION,
    "code": CODE,
    "math": MATH,
    "translation": TRANSLATION,
    "context_qa": CONTEXT_QA,
}


def build() -> tuple[list[dict], list[dict]]:
    """(train, heldout) rows in a fixed order: category order of CATEGORIES, then written order."""
    train, heldout = [], []
    for cat in CATEGORIES:
        for k, item in enumerate(SOURCES[cat], 1):
            messages = [{"role": "user", "content": item}] if isinstance(item, str) else item
            row = {"id": f"{cat}-{k:04d}", "category": cat, "messages": messages}
            (heldout if (k - 1) % HELDOUT_EVERY == 0 else train).append(row)
    return train, heldout


def write_jsonl(rows: list[dict], path: Path) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# --- validation ---


def _text(row: dict) -> str:
    """The user-visible text of a prompt (all user and system turns), used for duplicate checks."""
    return "\n".join(m["content"] for m in row["messages"] if m["role"] != "assistant")


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def validate(splits: dict[str, list[dict]], near_dup: float = 0.8) -> list[str]:
    """Return a list of problems (empty when the files are fine)."""
    problems: list[str] = []
    ids: dict[str, str] = {}
    rows_all = []
    for split, rows in splits.items():
        for i, row in enumerate(rows, 1):
            where = f"{split}:{i}"
            if set(row) != {"id", "category", "messages"}:
                problems.append(f"{where}: fields {sorted(row)} != ['category', 'id', 'messages']")
                continue
            if not isinstance(row["id"], str) or not re.fullmatch(r"[a-z_]+-\d{4}", row["id"]):
                problems.append(f"{where}: bad id {row['id']!r}")
            if row["category"] not in CATEGORIES:
                problems.append(f"{where}: unknown category {row['category']!r}")
            elif not row["id"].startswith(row["category"] + "-"):
                problems.append(f"{where}: id {row['id']!r} does not match category {row['category']!r}")
            if row["id"] in ids:
                problems.append(f"{where}: id {row['id']!r} already used in {ids[row['id']]}")
            ids[row["id"]] = where
            msgs = row["messages"]
            roles = [m.get("role") for m in msgs] if isinstance(msgs, list) else []
            if not roles or any(
                set(m) != {"role", "content"} or not isinstance(m["content"], str) or not m["content"].strip()
                for m in msgs
            ):
                problems.append(f"{where}: messages must be a non-empty list of {{role, content}} with text")
                continue
            turns = roles[1:] if roles[0] == "system" else roles
            expected = ["user" if j % 2 == 0 else "assistant" for j in range(len(turns))]
            if turns != expected or turns[-1] != "user":
                problems.append(
                    f"{where}: roles {roles} must be [system] user (assistant user)* ending with user"
                )
            if row["category"] in ("summarization", "context_qa"):
                longest = max(len(m["content"].split()) for m in msgs if m["role"] == "user")
                if longest < PASSAGE_WORDS[0]:
                    problems.append(
                        f"{where}: {row['category']} prompt has no passage of {PASSAGE_WORDS[0]}+ words"
                    )
            rows_all.append((where, row))

    # Exact duplicates (after normalising case and whitespace), then near-duplicates by word-set overlap.
    seen: dict[str, str] = {}
    for where, row in rows_all:
        key = " ".join(_text(row).lower().split())
        if key in seen:
            problems.append(f"{where}: same text as {seen[key]}")
        seen[key] = where
    bags = [(where, _words(_text(row))) for where, row in rows_all]
    for a in range(len(bags)):
        wa, sa = bags[a]
        for b in range(a + 1, len(bags)):
            wb, sb = bags[b]
            j = len(sa & sb) / len(sa | sb)
            if j >= near_dup:
                problems.append(f"{wa} and {wb}: near-duplicate texts (word overlap {j:.2f})")
    return problems


def counts_table(splits: dict[str, list[dict]]) -> str:
    """Markdown table: prompts per category and split, plus multi-turn / system-message counts."""
    count = {s: Counter(r["category"] for r in rows) for s, rows in splits.items()}
    multi = Counter(
        r["category"]
        for rows in splits.values()
        for r in rows
        if sum(m["role"] == "user" for m in r["messages"]) > 1
    )
    system = Counter(
        r["category"] for rows in splits.values() for r in rows if r["messages"][0]["role"] == "system"
    )
    names = list(splits)
    lines = [
        "| category | " + " | ".join(names) + " | total | multi-turn | with system |",
        "|---|" + "---:|" * (len(names) + 3),
    ]
    for cat in CATEGORIES:
        cells = [count[s][cat] for s in names]
        lines.append(
            f"| {cat} | " + " | ".join(map(str, cells)) + f" | {sum(cells)} | {multi[cat]} | {system[cat]} |"
        )
    totals = [sum(count[s].values()) for s in names]
    lines.append(
        "| **all** | "
        + " | ".join(map(str, totals))
        + f" | {sum(totals)} | {sum(multi.values())} | {sum(system.values())} |"
    )
    return "\n".join(lines)


@dataclass
class BuildConfig:
    check: bool = field(default=False, metadata={"help": "validate the existing files instead of writing them"})
    out: str = field(default=str(HERE), metadata={"help": "folder for train.jsonl / heldout.jsonl"})


def main() -> int:
    cfg = cli.parse(BuildConfig, doc=__doc__)
    out = Path(cfg.out)

    if cfg.check:
        splits = {name: read_jsonl(out / f"{name}.jsonl") for name in ("train", "heldout")}
        built_train, built_heldout = build()
        if splits != {"train": built_train, "heldout": built_heldout}:
            print("note: the files differ from what this script builds (edited by hand, or not rebuilt)")
    else:
        train, heldout = build()
        splits = {"train": train, "heldout": heldout}
    problems = validate(splits)
    for p in problems:
        print("problem:", p, file=sys.stderr)
    if problems:
        return 1
    if not cfg.check:
        out.mkdir(parents=True, exist_ok=True)
        for name, rows in splits.items():
            write_jsonl(rows, out / f"{name}.jsonl")
            print(f"wrote {len(rows)} prompts to {out / f'{name}.jsonl'}")
    print(counts_table(splits))
    return 0


if __name__ == "__main__":
    sys.exit(main())
