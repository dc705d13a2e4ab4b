"""EvalConfig: what an evaluation measures (drafts, prompts, the gamma x lookup x tree grid, anchors), its defaults
(the decoder's own, decode.options) and checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product

from decode.bench import BenchConfig
from decode.errors import UserError
from decode.models.targets import check_load_format, load_format_field
from decode.options import MAX_GAMMA, SCHEDULES, DecodeOptions


@dataclass
class EvalConfig:
    target: str = field(default="default", metadata={"help": "target model"})
    run: str | None = field(default=None, metadata={"help": "training run dir: evaluate every checkpoint"})
    drafts: list = field(default_factory=list, metadata={"help": "draft folders (or layers:0,29) to evaluate; a model "
                         "with another tokenizer than the target's is decoded through its text"})
    drafts_extra: list = field(default_factory=list, metadata={"help": "off-the-shelf drafts (any causal LM, `default`, "
                               "a model with another tokenizer) measured beside, reported apart, never shipped"})
    prompts: str = field(default="heldout", metadata={"help": "prompts (default: the bundled held-out set)"})
    categories: list = field(default_factory=list, metadata={"help": "only these prompt categories"})
    limit: int = field(default=0, metadata={"help": "N prompts in all, taken in turn from each category (0 = all)"})
    max_new_tokens: int = field(default=64, metadata={"help": "tokens per prompt"})
    temperature: float = field(default=DecodeOptions.temperature, metadata={"help": "0 = greedy (lossless is checked)"})
    gamma: int | list = field(default=DecodeOptions.gamma, metadata={"help": "γ, or a list of γ to sweep"})
    parallel_gamma: int | list = field(default_factory=list, metadata={"help": "γ for parallel drafts (one forward "
                                        "proposes γ, so they may pay at a larger γ), or a list; empty = --gamma"})
    lookup: int | list = field(default=DecodeOptions.lookup, metadata={"help": "decoder's context lookup: n-gram length (0 = off), or a list "
                                                           "to compare, e.g. [0, 2] (decode.drafting.lookup)"})
    lookup_tokens: int = field(default=DecodeOptions.lookup_tokens, metadata={"help": "tokens per lookup proposal (0 = γ)"})
    tree_nodes: int | list = field(default=DecodeOptions.tree_nodes, metadata={"help": "token tree of up to N nodes, γ levels (0 = a "
                                                                  "chain), or a list to compare, e.g. [0, 6]"})
    draft_weights: str = field(default=DecodeOptions.draft_weights, metadata={"help": "float32 | float16 | int8: drafts run with weights "
                                                                "stored so on CPU (decode.runners.smallgemm: a cheaper draft step)"})
    draft_context: int = field(default=DecodeOptions.draft_context, metadata={"help": "standalone drafts read only "
                               "the prompt's last N tokens (0 = the window chosen by cost: decode.drafting.prompt_read)"})
    long_prompts: str = field(default="", metadata={"help": "also time each design's best configuration on this long "
                              "prompt set, e.g. long-heldout (distill/evaluate/long_check.py; empty = off)"})
    long_limit: int = field(default=3, metadata={"help": "prompts of --long-prompts (and of --long-unfamiliar), taken "
                            "in turn from each category"})
    screen_limit: int = field(default=0, metadata={"help": "decide on fewer prompts: each draft's plausible settings "
                              "(the γ its cost model puts near its best, every lookup and tree setting) on the first "
                              "N prompts, then only the fastest trained ones (--confirm) again on all of them (0 = "
                              "every setting on every prompt)"})
    confirm: int = field(default=2, metadata={"help": "after a screen, its N fastest trained settings again on every "
                         "prompt, beside one target-alone baseline; the fastest of them ships (on 8 prompts the screen's "
                         "top settings sit within its noise of each other)"})
    long_unfamiliar: str = field(default="long-ood", metadata={"help": "with --long-prompts, also this long set from "
                                 "sources unlike the bundled ones (distill/data/long_ood; empty = off)"})
    long_window: bool = field(default=True, metadata={"help": "with --long-prompts, choose each standalone or parallel "
                              "draft's window of the prompt by cost on that set and store it in its specdistill.json "
                              "(decode/bench/window_cost.py), before timing"})
    long_schedule: str = field(default=DecodeOptions.schedule, metadata={"help": "the schedule the long check times "
                               "the best configurations with (the decoder's default)"})
    checkpoints: str = field(default="all", metadata={"help": "all (earlier checkpoints at the first γ only) | last"})
    # constant here, not the decoder's adaptive default: the sweep measures each design at each γ as it is (the
    # cost model predicts a constant γ)
    schedule: str = field(default="constant", metadata={"help": "constant (each γ as it is) | heuristic | dynamic | "
                                                               "adaptive"})
    output: str | None = field(default=None, metadata={"help": "EVAL_DIR (default: RUN/eval or runs/eval)"})
    hf_static: bool = field(default=BenchConfig.hf_static, metadata={"help": "with the hf anchors on a GPU, also "
                            "transformers' generate with a static cache, compiled (its warm-up compiles: minutes)"})
    anchors: str = field(default="hf", metadata={"help": "hf: also HF assisted, prompt lookup, untrained layer cut | "
                                                      "vllm: those and vLLM's own numbers (target alone, each "
                                                      "draft, n-gram) | none (--no-anchors)"})
    vllm_python: str = field(default="", metadata={"help": "with --anchors vllm: the python that has vLLM, when not "
                             "this one (scripts/setup.sh installs it in .venv-vllm)"})
    report_to: str = field(default="none", metadata={"help": "wandb | none"})
    wandb_project: str = field(default="specdistill", metadata={"help": "W&B project"})
    seed: int = field(default=0, metadata={"help": "sampling seed"})
    device: str = field(default="auto", metadata={"help": "auto (CUDA when present: a target too large for one GPU "
                                                          "is spread over all; else CPU) | cpu | cuda[:N]"})
    dtype: str = field(default="auto", metadata={"help": "auto | float32 | bfloat16"})
    load_format: str = load_format_field()

    def __post_init__(self):
        # booleans from YAML or callers (anchors: false) mean what they did when this was an on/off flag
        self.anchors = {True: "hf", False: "none"}.get(self.anchors, self.anchors)
        if self.anchors not in ("hf", "vllm", "none"):
            raise UserError(f"--anchors must be hf, vllm or none, got {self.anchors!r}")
        if not self.gammas():
            raise UserError(f"--gamma must be >= 1 (draft tokens per round), got {self.gamma}")
        given = self.parallel_gamma if isinstance(self.parallel_gamma, list) else [self.parallel_gamma]
        bad = [int(g) for g in given if not 1 <= int(g) <= MAX_GAMMA]  # none given: --gamma's, checked below
        if bad:
            raise UserError(f"--parallel-gamma must be in 1..{MAX_GAMMA} (tokens a parallel draft proposes a round), "
                            f"got {bad[0]}")
        for g, n, k in product(self.gammas() + self.parallel_gammas(), self.lookups(), self.tree_sizes()):
            DecodeOptions(gamma=g, schedule=self.schedule, lookup=n, lookup_tokens=self.lookup_tokens, tree_nodes=k,
                          draft_weights=self.draft_weights, draft_context=self.draft_context,
                          temperature=self.temperature)  # the checks live there
        if self.long_schedule not in SCHEDULES:
            raise UserError(f"--long-schedule must be one of {', '.join(SCHEDULES)} (the schedule the long check times "
                            f"with), got {self.long_schedule!r}")
        check_load_format(self.load_format)
        if self.anchors == "vllm" and self.load_format == "dummy":  # vLLM reads the target folder's weights itself
            raise UserError("--load-format dummy builds the target in transformers; vLLM's anchors would serve other "
                            "weights: use --anchors hf (or none)")
        if self.screen_limit < 0:
            raise UserError(f"--screen-limit must be >= 0 (prompts the settings are screened on; 0 = off), got "
                            f"{self.screen_limit}")
        if self.confirm < 1:
            raise UserError(f"--confirm must be >= 1 (the screen's fastest settings timed again on every prompt), got "
                            f"{self.confirm}")
        if self.long_limit < 0:
            raise UserError(f"--long-limit must be >= 0 (prompts of --long-prompts; 0 = off), got {self.long_limit}")
        if self.checkpoints not in ("all", "last"):
            raise UserError(f"--checkpoints must be 'all' or 'last', got {self.checkpoints!r}")
        if not self.run and not self.drafts and not self.drafts_extra:
            raise UserError("give --run RUN_DIR (every checkpoint) or --drafts D1 D2 ...")

    def hf_anchors(self) -> bool:
        return self.anchors in ("hf", "vllm")

    def gammas(self) -> list[int]:
        return [int(g) for g in (self.gamma if isinstance(self.gamma, list) else [self.gamma])]

    def parallel_gammas(self) -> list[int]:
        """γ for parallel drafts (decode.drafting.parallel): --parallel-gamma, else --gamma."""
        g = self.parallel_gamma if isinstance(self.parallel_gamma, list) else [self.parallel_gamma]
        return [int(x) for x in g] or self.gammas()

    def lookups(self) -> list[int]:
        return [int(n) for n in (self.lookup if isinstance(self.lookup, list) else [self.lookup])] or [0]

    def tree_sizes(self) -> list[int]:
        return [int(k) for k in (self.tree_nodes if isinstance(self.tree_nodes, list) else [self.tree_nodes])] or [0]
