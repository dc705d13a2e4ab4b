"""Every decoding knob with its default, help text and check, defined once (generate, decode.bench, distill read them).

The checks raise UserError with the command-line flag's name and the fix, so a config built from flags and a
DecodeOptions built in Python fail alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from decode.drafting.sampling import SamplingParams
from decode.errors import UserError
from decode.runners.smallgemm import WEIGHTS

SCHEDULES = ("constant", "heuristic", "dynamic", "adaptive")
DEFAULT_CONFIDENCE = 0.4  # dynamic schedule: stop drafting once the draft's top probability falls below this
# The most tokens a round drafts (γ) or verifies in a token tree (tree_nodes). Even at α = 0.9 a token 64
# deep is accepted with probability 0.9^64 ≈ 0.001, so a longer chain only costs draft steps and a wider verify;
# the caches are sized by it up front (γ = 100000 asked for a 9.2 GB cache for a 135M target).
MAX_GAMMA = 64


def check_schedule(kind: str) -> None:
    if kind not in SCHEDULES:
        raise UserError(f"unknown schedule {kind!r}: --schedule must be one of {', '.join(SCHEDULES)}")


@dataclass
class DecodeOptions:
    gamma: int = field(default=4, metadata={"help": "γ: draft tokens proposed per round (the most, for heuristic and "
                                                    "dynamic schedules)"})
    # adaptive by default: on held-out prompts it ran at 0.987 of the best constant γ's speed, and where drafting
    # does not pay (unfamiliar prompts) it falls back towards the target alone (docs/results.md, issue 53)
    schedule: str = field(default="adaptive", metadata={"help": "adaptive: the γ in 0..γ with the most tokens a "
                                                              "second, measured as it decodes (0: the target alone) | "
                                                              "constant: γ every round | heuristic: +2 after a full "
                                                              "accept, -1 otherwise | dynamic: stop drafting at the "
                                                              "first doubtful token (--confidence)"})
    confidence: float = field(default=DEFAULT_CONFIDENCE, metadata={"help": "dynamic schedule: stop drafting once the "
                                                                          "draft's top probability falls below this"})
    lookup: int = field(default=0, metadata={"help": "also propose from the context when its last N tokens occurred "
                                                     "before (decode.drafting.lookup; 0 = off)"})
    lookup_tokens: int = field(default=0, metadata={"help": "tokens per lookup proposal (0 = γ); they cost no draft "
                                                            "forward, so more than γ usually pays"})
    tree_nodes: int = field(default=0, metadata={"help": "draft a token tree of up to N nodes and γ levels each "
                                                         "round, verified in one target forward (decode.drafting.tree; 0 = a "
                                                         "chain of γ)"})
    # chosen by cost by default: at 4K-8K tokens on a CPU the draft's forward over the whole prompt cost more than a
    # 64-token answer's drafting saved, and its step grows with every key it attends to (docs/results.md, issue 65)
    draft_context: int = field(default=0, metadata={"help": "a standalone draft reads only the prompt's last N "
                                                            "tokens (its own positions from 0; lookup still reads "
                                                            "all of it; the output is unchanged). 0 = by cost: the "
                                                            "window stored with the draft (evaluate's long check), "
                                                            "else the cost model's (decode.drafting.prompt_read); "
                                                            "N in 1..the draft's trained length"})
    draft_weights: str = field(default="float32", metadata={"help": "float32 | float16 | int8: a llama-family draft "
                                                                    "runs with weights stored so on CPU "
                                                                    "(decode.runners.smallgemm: a cheaper draft step)"})
    temperature: float = field(default=0.0, metadata={"help": "0 = greedy (the output is the target's, token for "
                                                              "token)"})
    top_k: int = field(default=0, metadata={"help": "sample among the k most likely tokens (0 = off)"})
    top_p: float = field(default=1.0, metadata={"help": "sample within this probability mass (1 = off)"})

    def __post_init__(self):
        SamplingParams(self.temperature, self.top_k, self.top_p)  # its checks: temperature, top_k, top_p
        if not 1 <= self.gamma <= MAX_GAMMA:
            raise UserError(f"--gamma must be in 1..{MAX_GAMMA} (draft tokens per round; a token {MAX_GAMMA} deep "
                            f"is almost never accepted), got {self.gamma}")
        check_schedule(self.schedule)
        if not 0 <= self.confidence <= 1:
            raise UserError(f"--confidence must be in [0, 1] (the dynamic schedule's threshold on the draft's top "
                            f"probability), got {self.confidence}")
        if self.lookup < 0:
            raise UserError(f"--lookup must be >= 0 (context n-gram length; 0 = off), got {self.lookup}")
        if self.lookup_tokens < 0:
            raise UserError(f"--lookup-tokens must be >= 0 (tokens per lookup proposal; 0 = γ), got {self.lookup_tokens}")
        if not 0 <= self.tree_nodes <= MAX_GAMMA:
            raise UserError(f"--tree-nodes must be in 0..{MAX_GAMMA} (nodes of the token tree a round verifies; 0 = "
                            f"a chain), got {self.tree_nodes}")
        if self.tree_nodes and self.schedule not in ("constant", "adaptive"):
            raise UserError(f"--tree-nodes {self.tree_nodes} drafts γ levels every round; the {self.schedule} schedule "
                            "changes a chain's length: use --schedule constant or adaptive with a tree, or --tree-nodes 0")
        if self.draft_context < 0:
            raise UserError(f"--draft-context must be 0 (the window chosen by cost) or 1..the draft's trained length "
                            f"(the prompt's last N tokens the draft reads), got {self.draft_context}")
        if self.draft_weights not in WEIGHTS:
            names = ", ".join(WEIGHTS)
            raise UserError(f"--draft-weights must be one of {names}, got {self.draft_weights!r} "
                            f"(in Python: draft_weights must be one of {names})")

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p)
