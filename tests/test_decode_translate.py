"""Drafts with another tokenizer (decode.drafting.translate, decode.models.vocab_pair): the bytes of every token, the
shared vocabulary, the prompt as the draft reads it; greedy output equal to the target alone on every runner, chains,
schedules, trees and lookup; an oracle draft's text accepted across tokens that straddle the cut; sampling distributed
as the target's (chi-square, with a broken map that must fail it); a pair sharing too little refused for sampling.

Real tokenizers: the default's SmolLM2 (target) and GPT-2's (draft), plus a SentencePiece-style one (conftest's
tokenizer_pair); the models are tiny and random, or tables whose distributions are known exactly.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

import decode.drafting.speculative as spec
import decode.models.vocab_pair as vp
from decode import DecodeOptions, SamplingParams, generate
from decode.drafting.sampling import logits_to_probs
from decode.errors import UserError
from decode.prompts import encode_prompt
from decode.runners.graphs import GraphLlama
from decode.runners.hf import HFRunner

pytestmark = pytest.mark.usefixtures("torch_single_thread")

TEXT = "Café au lait → 42!\n\n    def f(x):\treturn x  # 東京 naïve"


def _llama(seed: int, vocab: int, init: float = 0.3):
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                        initializer_range=init, bos_token_id=None, eos_token_id=None,
                                        pad_token_id=None)).eval()


def _gpt2(seed: int, vocab: int):
    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=2)).eval()


# --- the two vocabularies


@pytest.mark.parametrize("name", ["target", "gpt2", "sp"])
def test_token_bytes_spell_the_text(tokenizer_pair, name):
    tok = getattr(tokenizer_pair, name)
    ids = vp.encode_text(tok, TEXT)  # the SentencePiece one prefixes a space: encoded after the anchor
    assert vp.joined(vp.token_bytes(tok), ids) == TEXT.encode()
    assert tok.decode(ids) == TEXT


def test_tokenizer_kinds(tokenizer_pair):
    assert vp.tokenizer_kind(tokenizer_pair.target) == vp.tokenizer_kind(tokenizer_pair.gpt2) == "byte_level"
    assert vp.tokenizer_kind(tokenizer_pair.sp) == "sentencepiece"
    assert vp.piece_bytes("\u0120fox", "byte_level") == b" fox" and vp.piece_bytes("\u010a", "byte_level") == b"\n"
    assert vp.piece_bytes("\u2581fox", "sentencepiece") == b" fox" and vp.piece_bytes("<0x0A>", "sentencepiece") == b"\n"
    assert vp.piece_bytes("â", "sentencepiece") == "â".encode()  # a character, not byte 0xE2


def test_split_utf8():
    assert vp.split_utf8("añb".encode()) == ("añb", 4)
    assert vp.split_utf8(b"ab\xe2\x82") == ("ab", 2)  # a character cut at the end waits
    assert vp.split_utf8(b"a\xffb") == ("ab", 3)  # a byte no character starts with is skipped
    assert vp.split_utf8(b"a\xffb", skip_invalid=False) == ("a", 1)


def test_shared_vocabulary_is_one_to_one(tokenizer_pair):
    t, d = tokenizer_pair.target, tokenizer_pair.gpt2
    shared = vp.SharedVocab(t, d, len(t), len(d))
    assert shared.size == 36961 and shared.coverage > 0.9  # 36,960 same-bytes pairs and EOS with EOS
    assert len(set(shared.draft_ids.tolist())) == len(set(shared.target_ids.tolist())) == shared.size
    tb, db = vp.token_bytes(t), vp.token_bytes(d)
    assert all(tb[ti] == db[di] for di, ti in zip(shared.draft_ids.tolist(), shared.target_ids.tolist())
               if di != d.eos_token_id)
    assert shared.to_target(d.eos_token_id) == t.eos_token_id
    fox = d(" fox")["input_ids"][0]
    assert t.convert_ids_to_tokens(shared.to_target(fox)) == "\u0120fox" and shared.to_draft([shared.to_target(fox)]) == [fox]
    q = torch.zeros(len(d))
    q[fox] = 1.0
    assert shared.expand(q)[shared.to_target(fox)] == 1.0 and shared.expand(q).sum() == 1.0
    assert torch.isinf(shared.restrict(torch.zeros(len(d)))).sum() == len(d) - shared.size


def test_draft_prompt_reads_the_targets_text(tokenizer_pair):
    t, d = tokenizer_pair.target, tokenizer_pair.gpt2
    ids = encode_prompt(t, {"messages": [{"role": "user", "content": "Hi there"}]})
    assert vp.draft_prompt(ids, t, t) == ids  # a special token the draft has too stays
    text = d.decode(vp.draft_prompt(ids, t, d))
    assert "<|im_start|>" not in text and text.endswith("user\nHi there\nassistant\n")
    sp = tokenizer_pair.sp
    assert sp.decode(vp.draft_prompt(t("x jumps")["input_ids"], t, sp)) == "x jumps"


def test_chat_templates_that_disagree_are_one_line(tokenizer_pair):
    t = tokenizer_pair.target
    other = SimpleNamespace(chat_template="x", apply_chat_template=lambda *a, **k: "<turn>user\nhi<end>\n")
    row = {"id": "p1", "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(UserError, match=r"prompt 'p1': the draft's chat template renders it otherwise .*--no-chat"):
        vp.check_chat_template(t, other, row)
    vp.check_chat_template(t, t, row)  # the same template
    vp.check_chat_template(t, tokenizer_pair.gpt2, row)  # the draft has none: it reads the target's text


# --- greedy: the target's own output, whatever the draft


@pytest.fixture(scope="module")
def pair(tokenizer_pair):
    t, d = tokenizer_pair.target, tokenizer_pair.gpt2
    target = _llama(0, len(t))
    prompts = [encode_prompt(t, {"messages": [{"role": "user", "content": c}]}) for c in ("Write about the sea.", "2+2?")]
    return SimpleNamespace(t=t, d=d, target=target, prompts=prompts,
                           want=[generate(target, None, ids, 24)[0] for ids in prompts])


OPTIONS = {"g1": DecodeOptions(gamma=1, schedule="constant"), "g4": DecodeOptions(gamma=4, schedule="constant"), "dynamic": DecodeOptions(gamma=3, schedule="dynamic"),
           "heuristic": DecodeOptions(gamma=2, schedule="heuristic"), "tree4": DecodeOptions(gamma=3, tree_nodes=4, schedule="constant"),
           "lookup": DecodeOptions(gamma=3, lookup=2, schedule="constant")}
CASES = [("fast", k) for k in OPTIONS] + [(r, k) for r in ("hf", "graph") for k in ("g4", "tree4")]


@pytest.mark.parametrize("runner, name", CASES, ids=[f"{r}-{k}" for r, k in CASES])
def test_greedy_output_is_the_targets(pair, runner, name, hf_greedy):
    options = OPTIONS[name]
    # GPT-2 runs on the HF runner; the CUDA graph path's step (GraphLlama) runs eagerly on the CPU, both caches included
    model = {"fast": _llama(1, len(pair.d)), "hf": _gpt2(1, len(pair.d)),
             "graph": GraphLlama(_llama(1, len(pair.d)), graphs=False)}[runner]
    draft = vp.OtherTokenizerDraft(model, pair.d, pair.t, pair.target.config.vocab_size)
    for ids, want in zip(pair.prompts, pair.want):
        out, stats = generate(pair.target, draft, ids, 24, options)
        assert out == want
        assert stats.proposed > 0 and stats.draft_tokens > 0
    assert pair.want[0] == hf_greedy(pair.target, pair.prompts[0], 24)


# --- one size, two tokenizers (Llama 2's and Mistral's both have 32,000 ids): the same paths, both ways

SAME_SIZE = [("smol32k", "gpt2_32k"), ("gpt2_32k", "smol32k")]


@pytest.fixture(scope="module", params=SAME_SIZE, ids=[f"{t}-from-{d}" for t, d in SAME_SIZE])
def same_size(request, tokenizer_pair):
    t, d = (getattr(tokenizer_pair, n) for n in request.param)
    target = _llama(0, len(t))
    prompts = [t(c)["input_ids"] for c in ("Write about the sea.", "def add(a, b):\n")]
    return SimpleNamespace(t=t, d=d, target=target, prompts=prompts,
                           want=[generate(target, None, ids, 24)[0] for ids in prompts])


@pytest.mark.parametrize("runner, name", [("fast", "g4"), ("fast", "tree4"), ("hf", "g4"), ("graph", "g4")])
def test_a_same_size_pair_is_lossless_and_counted_in_target_tokens(same_size, runner, name):
    assert len(same_size.t) == len(same_size.d) == 32000 and not vp.same_tokenizer(same_size.t, same_size.d)
    model = {"fast": _llama(1, 32000), "hf": _gpt2(1, 32000), "graph": GraphLlama(_llama(1, 32000), graphs=False)}[runner]
    draft = vp.OtherTokenizerDraft(model, same_size.d, same_size.t, 32000)
    for ids, want in zip(same_size.prompts, same_size.want):
        out, stats = generate(same_size.target, draft, ids, 24, OPTIONS[name])
        assert out == want
        # α and τ read target tokens: every emitted token after the first is an accepted proposal or a round's own
        assert stats.accepted + stats.rounds == len(out) - 1 and stats.proposed > 0 and stats.draft_tokens > 0


# --- an oracle draft: its text is the target's, so whatever its tokens, nearly all of it must be accepted


class ListCache:
    def __init__(self):
        self.tokens = []

    def crop(self, n):
        del self.tokens[len(self.tokens) + n:]

    def get_seq_length(self):
        return len(self.tokens)

    def keep(self, start, rows):
        self.tokens[start:] = [self.tokens[start + r] for r in rows]


class Scripted(HFRunner):
    """A runner that writes a fixed text: at each position it puts all its mass on the next token of `script` (its
    own ids for the text after the prompt: what it reads must spell a prefix of the text, else it says token 0).
    As the target: `script` is the target's token sequence. As the draft: the text, tokenized by its own tokenizer
    from wherever its context ends."""

    def __init__(self, tok, text: bytes, prompt_len: int, fixed: list[int] | None = None):
        self.tok, self.text, self.prompt_len, self.fixed = tok, text, prompt_len, fixed
        self.table = vp.token_bytes(tok)
        self.device, self.model = torch.device("cpu"), None
        self.config = SimpleNamespace(vocab_size=len(tok), max_position_embeddings=4096)

    def new_cache(self, max_len):
        return ListCache()

    def _next(self, ctx: list[int]) -> int:
        if self.fixed is not None:  # the target: its script, token by token
            n = len(ctx) - self.prompt_len
            return self.fixed[n] if 0 <= n < len(self.fixed) else 0
        done = vp.joined(self.table, ctx[self.prompt_len:])
        if not self.text.startswith(done) or done == self.text:
            return 0
        rest, _ = vp.split_utf8(self.text[len(done):])
        return (vp.encode_text(self.tok, rest) or [0])[0]

    def forward(self, ids, cache, keep, tree=None):
        cache.tokens.extend(ids)
        rows = []
        for i in range(len(cache.tokens) - keep, len(cache.tokens)):
            ctx = cache.tokens[:i + 1]
            if tree is not None:
                seen = tree[1][i - (len(cache.tokens) - tree[1].shape[0])].nonzero().flatten().tolist()
                ctx = [cache.tokens[j] for j in seen]
            row = torch.full((self.config.vocab_size,), -10.0)
            row[self._next(ctx)] = 10.0
            rows.append(row)
        return torch.stack(rows)


def test_an_oracle_draft_is_accepted_across_tokens_that_straddle_the_cut(tokenizer_pair, monkeypatch):
    """The target writes ' fo' + 'x' (two tokens, not its tokenizer's ' fox'): the draft's text past the cut ('x
    jumps') becomes target tokens that continue ' fo'. transformers re-encodes a window across the cut and drops 'x'."""
    t, d = tokenizer_pair.target, tokenizer_pair.gpt2
    words = ["The", " quick", " brown", " fo", "x", " jumps", " over", " the", " lazy", " dog", ".", "\n\n", "def",
             " add", "(a", ",", " b", "):", "\n", "   ", " return", " a", " +", " b", "\n"]
    script = [tid for w in words for tid in t(w, add_special_tokens=False)["input_ids"]]
    text = vp.joined(vp.token_bytes(t), script)
    prompt = t("Say it:")["input_ids"]
    d_prompt = vp.draft_prompt(prompt, t, d)
    target = Scripted(t, text, len(prompt), fixed=script)
    draft = vp.OtherTokenizerDraft(Scripted(d, text, len(d_prompt)), d, t, len(t))
    rounds, accept = [], spec.accept
    monkeypatch.setattr(spec, "accept", lambda p, *a, **k: rounds.append((p, accept(p, *a, **k)[0])) or accept(p, *a, **k))
    out, stats = generate(target, draft, prompt, len(script), DecodeOptions(gamma=4, schedule="constant"))
    assert out == script
    # the first round proposes the tokenizer's ' fox', which the target did not write; then everything is taken
    assert stats.acceptance_rate >= 0.85, stats.as_dict()
    out, stats = generate(target, draft, prompt, len(script), DecodeOptions(gamma=3, tree_nodes=4, schedule="constant"))
    assert out == script and stats.tree_ranks["2.0"][0] >= 5  # the tree's first children, past the first level
    x = t("x", add_special_tokens=False)["input_ids"]
    assert any(p[:1] == x and n >= 3 for p, n in rounds)  # after ' fo': 'x', ' jumps', ' over', ... accepted


# --- sampling: distributed as the target's own


def _ids(tok, words: list[str]) -> list[int]:
    out = []
    for w in words:
        ids = tok(w, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, (w, ids)
        out += ids
    return out


class Table(HFRunner):
    """A second-order Markov model over a few ids of a large vocabulary: logits after (a, b) are table[a, b] on
    `support`, -inf elsewhere; ids outside the support read as its first."""

    def __init__(self, vocab: int, support: list[int], seed: int, scale: float = 1.5):
        g = torch.Generator().manual_seed(seed)
        n = len(support)
        self.support, self.index = torch.tensor(support), {t: i for i, t in enumerate(support)}
        self.table = torch.randn(n, n, n, generator=g) * scale
        self.device, self.model = torch.device("cpu"), None
        self.config = SimpleNamespace(vocab_size=vocab, max_position_embeddings=4096)

    def new_cache(self, max_len):
        return ListCache()

    def forward(self, ids, cache, keep, tree=None):
        cache.tokens.extend(ids)
        c = [self.index.get(x, 0) for x in cache.tokens]
        if tree is not None:
            rows = [[c[j] for j in r.nonzero().flatten().tolist()] for r in tree[1]][len(ids) - keep:]
        else:
            rows = [c[:i + 1] for i in range(len(c) - keep, len(c))]
        out = torch.full((len(rows), self.config.vocab_size), float("-inf"))
        for k, r in enumerate(rows):
            out[k, self.support] = self.table[r[-2] if len(r) > 1 else 0, r[-1]]
        return out


SHARED_WORDS = [" the", " cat", " sat", " on", " mat", " dog", ".", " ran"]


def _tables(t, d) -> SimpleNamespace:
    """Target: 8 tokens of its tokenizer that the draft's also has and 2 it lacks; draft: twins of 6 of them and 2
    tokens the target's lacks (masked away by the restriction)."""
    d_bytes = set(filter(None, vp.token_bytes(d)))
    t_only = [i for i, b in enumerate(vp.token_bytes(t)) if b and b.strip() and b not in d_bytes][:2]
    t_bytes = set(filter(None, vp.token_bytes(t)))
    d_only = [i for i, b in enumerate(vp.token_bytes(d)) if b and b.strip() and b not in t_bytes][:2]
    target_support = _ids(t, SHARED_WORDS) + t_only
    draft_support = _ids(d, SHARED_WORDS[:6]) + d_only
    target = Table(len(t), target_support, seed=0)
    draft = vp.OtherTokenizerDraft(Table(len(d), draft_support, seed=1), d, t, len(t))
    return SimpleNamespace(target=target, draft=draft, support=target_support, prompt=_ids(t, SHARED_WORDS[:2]))


@pytest.fixture(scope="module")
def tables(tokenizer_pair):
    return _tables(tokenizer_pair.target, tokenizer_pair.gpt2)  # SmolLM2's and GPT-2's


@pytest.fixture(scope="module", params=SAME_SIZE, ids=[f"{t}-from-{d}" for t, d in SAME_SIZE])
def same_size_tables(request, tokenizer_pair):
    return _tables(*(getattr(tokenizer_pair, n) for n in request.param))


def _exact(tab, sampling: SamplingParams, n: int = 3) -> dict[tuple, float]:
    """P(t1..tn | prompt) under the target's own sampling, by enumeration over its support."""
    level = {(): 1.0}
    for _ in range(n):
        nxt = {}
        for prefix, pr in level.items():
            p = logits_to_probs(tab.target.forward(tab.prompt + list(prefix), ListCache(), 1)[-1], sampling)
            for x in tab.support:
                if p[x] > 0:
                    nxt[prefix + (x,)] = pr * float(p[x])
        level = nxt
    return level


def _chi2(tab, sampling, n_samples: int, seed: int, chi2_test, **kw) -> tuple[float, float]:
    exact = _exact(tab, sampling)
    cells = {c: i for i, c in enumerate(exact)}
    counts, probs = torch.zeros(len(cells) + 1), torch.tensor(list(exact.values()) + [0.0])
    g = torch.Generator().manual_seed(seed)
    options = DecodeOptions(gamma=3, temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p, **{"schedule": "constant", **kw})
    for _ in range(n_samples):
        out, _ = generate(tab.target, tab.draft, tab.prompt, 4, options, generator=g)
        counts[cells.get(tuple(out[:3]), len(cells))] += 1
    return chi2_test(counts, probs)


# ~12 ms a sample, most of it torch.multinomial over a 50k vocabulary (1.4 ms a draw here): counts kept small
@pytest.mark.parametrize("sampling, kw, n", [(SamplingParams(temperature=1.0), {}, 1500),
                                             (SamplingParams(temperature=1.0), {"tree_nodes": 4}, 800)],
                         ids=["t1", "tree4"])
def test_sampling_matches_the_targets_distribution(tables, sampling, kw, n, chi2_test):
    stat, threshold = _chi2(tables, sampling, n, 1, chi2_test, **kw)
    assert stat < threshold, (stat, threshold)


@pytest.mark.parametrize("kw", [{}, {"tree_nodes": 4}], ids=["chain", "tree4"])
def test_a_same_size_pair_samples_the_targets_distribution(same_size_tables, kw, chi2_test):
    stat, threshold = _chi2(same_size_tables, SamplingParams(temperature=1.0), 800, 3, chi2_test, **kw)
    assert stat < threshold, (stat, threshold)


def test_a_misplaced_q_fails_the_chi_square_test(tables, chi2_test, monkeypatch):
    """q written to the wrong target ids (transformers 5.24's UAG-TLI scatters its pruned rows so): not the target's."""
    shared = tables.draft.shared
    monkeypatch.setattr(shared, "target_ids", shared.target_ids.roll(1))
    stat, threshold = _chi2(tables, SamplingParams(temperature=1.0), 800, 2, chi2_test)
    assert stat > 2 * threshold, (stat, threshold)


# --- a pair that shares too little


def test_too_little_shared_vocabulary_refuses_sampling_and_trees(pair, tiny_tokenizer):
    words = tiny_tokenizer()  # t0..t96, word-level: almost nothing of SmolLM2's vocabulary
    draft = vp.OtherTokenizerDraft(_llama(2, len(words)), words, pair.t, pair.target.config.vocab_size)
    assert draft.shared.coverage < vp.MIN_COVERAGE
    for options, what in ((DecodeOptions(temperature=1.0, schedule="constant"), "sampling"), (DecodeOptions(tree_nodes=4, schedule="constant"), "--tree-nodes 4")):
        with pytest.raises(UserError, match=f"{what}.* needs proposals from the vocabulary both tokenizers share.*"
                                            "use --temperature 0 --tree-nodes 0"):
            generate(pair.target, draft, pair.prompts[0], 8, options)
    assert generate(pair.target, draft, pair.prompts[0], 24)[0] == pair.want[0]  # greedy chains: the text path


# --- transformers' universal assisted generation with sampling (UAG-TLI), the anchor: not lossless in 5.24


def test_transformers_uag_tli_is_not_the_targets_distribution_and_ours_is(pair, monkeypatch):
    """A draft rigged to put all its mass on one shared token x that the target gives p(x) < 1. Exact: x first with
    probability p(x). transformers 5.24's UAG-TLI writes the pruned head's logits to the wrong target ids, so its
    ratio reads another token's q, and it emits x nearly always; ours stays at p(x) (docs/decoder.md). Should
    transformers fix this, this test fails: then docs/decoder.md and docs/results.md say so no more."""
    t, d, target = pair.t, pair.d, pair.target
    temperature, n = 0.5, 200
    ids = t("The quick brown fox")["input_ids"]
    with torch.inference_mode():
        p = torch.softmax(target(torch.tensor([ids])).logits[0, -1] / temperature, -1)
    shared = vp.SharedVocab(t, d, len(t), len(d))
    x = next(int(i) for i in p.argsort(descending=True)[:50] if shared.t2d[i] >= 0 and 0.05 < p[i] < 0.7)
    draft = _gpt2(3, len(d))
    with torch.inference_mode():
        h = draft.transformer(torch.tensor([d("The quick brown fox")["input_ids"]])).last_hidden_state[0, -1]
        draft.lm_head.weight[int(shared.t2d[x])] = h * (20.0 / h.dot(h))  # draft logit 20, / T = 40: q(x) ~ 1

    def theirs():
        twin = _gpt2(3, len(d))  # UAG-TLI prunes its assistant's head in place: a fresh copy
        twin.load_state_dict(draft.state_dict())
        twin.generation_config.num_assistant_tokens, twin.generation_config.num_assistant_tokens_schedule = 1, "constant"
        torch.manual_seed(0)
        hits = 0
        for _ in range(n):
            y = target.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                max_new_tokens=2, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                                assistant_model=twin, tokenizer=t, assistant_tokenizer=d, pad_token_id=0)
            hits += int(y[0, len(ids)]) == x
        return hits / n

    g = torch.Generator().manual_seed(0)
    mine = vp.OtherTokenizerDraft(draft, d, t, len(t))
    ours = sum(generate(target, mine, ids, 2, DecodeOptions(gamma=1, temperature=temperature, schedule="constant"), generator=g)[0][0] == x
               for _ in range(n)) / n
    sigma = (float(p[x]) * (1 - float(p[x])) / n) ** 0.5
    assert abs(ours - float(p[x])) < 4 * sigma, (ours, float(p[x]))
    assert theirs() - float(p[x]) > 6 * sigma, float(p[x])
