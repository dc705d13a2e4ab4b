"""PeersConfig: which pipeline run the peers are measured against, the peer's recipes, and the evaluation's prompts."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from decode.errors import UserError

VENV_PYTHON = ".venv-vllm/bin/python"  # where scripts/setup.sh installs speculators (beside vLLM)
INSTALL = ("bash scripts/setup.sh (it installs speculators 0.9.0 into .venv-vllm), or into any environment: "
           "pip install --no-deps speculators==0.9.0 hs-connectors==0.9.0")

# speculators' eagle3 recipes, as its flags. `defaults`: its defaults (Muon at lr 1e-3, a linear schedule, 3 TTT steps
# at decay 1.0, KL to the target's distribution over the draft vocabulary) with the reduced draft vocabulary every
# one of its EAGLE-3 examples sets (--draft-vocab-size; here our head's, {vocab}); without one it trains the
# target's whole vocabulary, which no example does and which costs ~10x a step on a CPU. `small-data`: its
# documented 5k-sample recipe (examples/train/eagle3_llama3_8b_sharegpt_offline_5k.sh: lr 1e-4; there 32,000 of
# Llama-3's 128k ids). Both run our head's optimizer steps on our head's tokens, whatever epochs their examples name.
RECIPES = {
    "defaults": ["--draft-vocab-size", "{vocab}"],
    "small-data": ["--lr", "1e-4", "--draft-vocab-size", "{vocab}"],
}


@dataclass
class PeersConfig:
    run: str = field(default="", metadata={"help": "a pipeline folder (python -m distill.pipeline --output RUN): its "
                                               "collection, held-out data and trained drafts"})
    output: str | None = field(default=None, metadata={"help": "where the peers' data, drafts and the report go "
                                                                "(default RUN/peers)"})
    peer_python: str = field(default=VENV_PYTHON, metadata={"help": "the python that has speculators (and vLLM, for "
                                                                    "vLLM's α)"})
    recipes: list = field(default_factory=lambda: list(RECIPES), metadata={"help": "speculators recipes to train: "
                          + ", ".join(RECIPES)})
    steps: int = field(default=0, metadata={"help": "optimizer steps for each peer run (0 = as many as our head's)"})
    prompts: list = field(default_factory=lambda: ["heldout", "ood"], metadata={"help": "prompt sets, one evaluation "
                          "each, every draft in it ([] = train and measure the proxy only; a rerun evaluates)"})
    limit: int = field(default=48, metadata={"help": "prompts of each set, taken in turn from each category"})
    anchors: str = field(default="vllm", metadata={"help": "vllm: also vLLM's α for each draft it serves, on the first "
                                                          "prompt set (through --peer-python) | hf | none"})
    seed: int = field(default=0, metadata={"help": "the peers' seed"})

    def __post_init__(self):
        if not self.run:
            raise UserError("give --run RUN: a pipeline folder (python -m distill.pipeline --output RUN)")
        unknown = [r for r in self.recipes if r not in RECIPES]
        if unknown or not self.recipes:
            raise UserError(f"--recipes {unknown or '[]'}: choose from {', '.join(RECIPES)}")
        if self.steps < 0 or self.limit < 1:
            raise UserError(f"--steps must be >= 0 (0: our head's) and --limit >= 1, got {self.steps} and {self.limit}")
        if self.anchors not in ("vllm", "hf", "none"):
            raise UserError(f"--anchors must be vllm, hf or none, got {self.anchors!r}")
        self.peer_python = os.path.abspath(self.peer_python) if os.sep in self.peer_python else self.peer_python
