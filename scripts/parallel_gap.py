"""Where a parallel draft's second proposal loses to a chain draft's (issue 52): agreement only, no timing.

Greedy decoding emits the target's own output y. A round that starts after y_<t and accepts d_1 = y_t next asks for
y_{t+1}: a chain draft proposes it after reading y_t, a parallel draft after reading its mask in y_t's place, so its
q_2 has to cover every x_{t+1} it finds likely. This runs one parallel draft as the decoder does (a forward over
the new real token and one mask, the mask's row cropped) along the target's output, and at every t records

    p_1      the draft's probability of its own first choice for y_t (its confidence in d_1)
    ok_1     that choice is y_t: the round accepts d_1
    mask_2   (ok_1 rounds) its first choice at the mask is y_{t+1}: what a parallel round accepts second
    real_2   (ok_1 rounds) its first choice after reading y_t itself is y_{t+1}: what the same weights would
             propose second as a chain draft

by bucket of p_1. The gap mask_2 < real_2 is the information the mask lacks; where the draft is sure of y_t the
two should meet.

    python scripts/parallel_gap.py --draft RUN/train-parallel/checkpoint-000100/hf --limit 24 --max-new-tokens 64
"""
from __future__ import annotations

import argparse

import torch

from decode.bench import encode_all
from decode.drafting.parallel import ParallelDraft, mask_token
from decode.drafting.sampling import SamplingParams
from decode.drafting.speculative import generate
from decode.drafting.stats import Stats
from decode.models.draft_folder import VocabMap
from decode.models.targets import eos_ids, load_draft, load_target
from decode.options import DecodeOptions
from decode.runners.choice import runner_for
from distill.prompts import load_prompts

BUCKETS = (0.0, 0.4, 0.7, 0.9, 1.01)  # edges of p_1


@torch.no_grad()
def along_output(model, vocab: VocabMap, mask: int, prompt: list[int], out: list[int]) -> list[tuple]:
    """[(p_1, ok_1, mask_2, real_2)] for t = 0 .. len(out) - 2: the decoder's own ParallelDraft, given one real
    token a round (the prompt's last, then out[t]) and asked for 2 proposals: one forward over it and a mask."""
    draft = ParallelDraft(runner_for(model), vocab, prompt[:-1], prompt[-1], len(prompt) + len(out) + 1,
                          SamplingParams(), 0.0, 0, None, Stats(), mask)
    want = vocab.teacher(torch.tensor(out)).tolist()  # draft ids, -1 outside the draft's vocabulary
    rows = []
    for t in range(len(out) - 1):
        z = draft.forward(2).float()  # (2, V_draft): q_1 for out[t], q_2 (at the mask) for out[t + 1]
        p = torch.softmax(z[0], -1)
        rows.append([float(p.max()), int(z[0].argmax()) == want[t], int(z[1].argmax()) == want[t + 1]])
        draft.pending = [out[t]]
    for t in range(len(rows) - 1):
        rows[t].append(rows[t + 1][1])  # real_2 at t: the first choice at t + 1, after reading y_t
    return [tuple(r) for r in rows[:-1]]


def table(rows: list[tuple]) -> list[str]:
    """Markdown lines: per p_1 bucket, the share of positions, ok_1, and mask_2 / real_2 over the ok_1 rounds."""
    lines = ["| p_1 | positions | ok_1 | mask_2 (parallel) | real_2 (read y_t) |", "|---|---|---|---|---|"]
    for lo, hi in [*zip(BUCKETS, BUCKETS[1:]), (0.0, 1.01)]:
        r = [x for x in rows if lo <= x[0] < hi]
        ok = [x for x in r if x[1]]
        name = "all" if (lo, hi) == (0.0, 1.01) else f"{lo:.1f}-{min(hi, 1):.1f}"
        second = [f"{sum(x[i] for x in ok) / len(ok):.3f}" if ok else "–" for i in (2, 3)]
        lines.append(f"| {name} | {len(r) / max(1, len(rows)):.3f} | {len(ok) / max(1, len(r)):.3f} | {second[0]} "
                     f"| {second[1]} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="default")
    ap.add_argument("--draft", required=True, help="a parallel draft folder (config.json names its mask token)")
    ap.add_argument("--limit", type=int, default=24, help="held-out prompts, taken in turn from each category")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()
    target, tok = load_target(args.target, "float32")
    draft = load_draft(args.draft, target, tok)
    mask = mask_token(getattr(draft.model, "config", None))
    if mask is None:
        raise SystemExit(f"{args.draft} names no mask token (config.json mask_token_id): give a parallel draft")
    vocab = VocabMap(draft.vocab_map, target.config.vocab_size)
    rows = []
    for prompt in encode_all(load_prompts("heldout", limit=args.limit, spread=True), tok, args.max_new_tokens,
                             target.config.max_position_embeddings):
        out, _ = generate(target, None, prompt, args.max_new_tokens, DecodeOptions(), eos_token_ids=eos_ids(target, tok))
        rows += along_output(draft.model, vocab, mask, prompt, out)
    print("\n".join(table(rows)))


if __name__ == "__main__":
    main()
