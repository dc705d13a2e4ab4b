"""Benchmark one target/draft pair: target alone vs our speculative decoder vs transformers' assisted generation.

    python -m decode.bench --target default --draft layers:0,1,28,29 \
        --prompts distill/data/heldout.jsonl --max-new-tokens 64 --out result.json

All three run in one process on the same prompts after a warm-up, interleaved prompt by prompt so that
machine noise hits them alike; ratios are the result, absolute times are only as good as the machine.
transformers runs at the same constant γ with no confidence threshold, so both decoders make the same
proposals and speedup_vs_hf_assisted measures decoder overhead alone. transformers cannot run a feature head
(EAGLE-3 style, decode.models.feature_head), a reduced-vocabulary draft or a token tree; the result then says why
(`hf_assisted_skipped`). A draft with another tokenizer than the target's (any causal LM folder, `default`,
gemma3-270m) is decoded through its text (decode.drafting.translate) and timed beside transformers' universal assisted
generation; α and τ count target tokens. A feature head folder is one more --draft: α, τ, c (its step,
feature_head.HeadRunner, against the target's) and v(γ) as for any draft, with its own weights (no --draft-weights).
With --tree-nodes N (decode.drafting.tree) each round verifies a token tree of N nodes: the cost model then predicts from
the measured τ, the draft's levels a round (c each) and v(N) (costmodel.tree_speedup).
`lossless` is decode.drafting.lossless's rule for the target's dtype (float32: token for token; bf16/fp16: divergences
excused only at near-ties within an ε calibrated here, counted in the result): ours is judged against our target
alone, transformers' assisted generation against transformers' own generate (timed too: the hf_generate row).
The result JSON (docs/architecture.md) is written to --out and printed as the last stdout line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from decode import cli
from decode.bench.config import BenchConfig, check_head_options
from decode.bench.measure import encode_all, measure_pair
from decode.bench.results import summary
from decode.drafting import prompt_read
from decode.models.targets import (
    check_device,
    load_draft,
    load_target,
)
from decode.models.vocab_pair import check_chat_template
from decode.prompts import read_prompts


def parse_args(argv=None) -> BenchConfig:
    return cli.parse(BenchConfig, argv, __doc__)


def run(cfg: BenchConfig) -> dict:
    torch.manual_seed(cfg.seed)
    check_device(cfg.device)
    rows = read_prompts(cfg.prompts)
    if cfg.limit:
        rows = rows[: cfg.limit]
    target, tok = load_target(cfg.target, cfg.dtype, cfg.device, load_format=cfg.load_format)
    draft = load_draft(cfg.draft, target, tok, device=str(target.device))  # a spread target's first GPU
    check_head_options(draft, cfg, cfg.draft)
    prompt_read.check(draft.decoding, cfg)  # --draft-context within what the draft was trained on
    if draft.other is not None and cfg.chat_template:  # a draft with its own tokenizer must read the target's text
        for row in rows:
            check_chat_template(tok, draft.other.tokenizer, row)
    encoded = encode_all(rows, tok, cfg.max_new_tokens, target.config.max_position_embeddings, cfg.chat_template)
    return measure_pair(target, tok, draft, rows, encoded, cfg, cfg.hf_assisted,
                        log=lambda m: print(m, file=sys.stderr))


def main(argv=None) -> None:
    cfg, result = cli.run_job(BenchConfig, lambda cfg, argv: run(cfg), argv, __doc__)
    print(summary(result), file=sys.stderr)
    line = json.dumps(result)
    if cfg.out:
        Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.out).write_text(json.dumps(result, indent=2) + "\n")
    print(line)
