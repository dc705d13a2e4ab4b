"""Does the draft copy? Its teacher-forced agreement split by whether the context could be copied from.

    python -m distill.train.copy_probe --draft runs/pipeline-default/train/checkpoint-000500/hf \
        --data runs/pipeline-default/heldout

Small targets repeat their prompt and themselves. Where the last n tokens occurred earlier in the context,
the token that followed them then (decode.drafting.lookup) is often the target's next token; a 2-layer draft trained on
a few 10k tokens does not learn that copy (it needs induction heads). This prints, on collected held-out data:
  - per minimum match length n: the share of positions with a match, the lookup's and the draft's top-1
    agreement with the target there, and the agreement of "lookup where it matches, else the draft"
    (the decoder's --lookup n, teacher-forced);
  - on spans of random tokens shown twice, how often the draft and the target continue the copy.
The JSON result is the last stdout line.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field

import torch

from decode.cli import run_job
from decode.drafting.lookup import MAX_NGRAM, longest_match
from decode.errors import UserError
from decode.models.draft_folder import VocabMap
from decode.models.targets import load_draft, load_target
from distill.collect.shards import load_collected
from distill.train import batches
from distill.train.student import Student


@dataclass
class ProbeConfig:
    draft: str = field(default="", metadata={"help": "draft folder (a checkpoint's hf/) or layers:0,1"})
    data: str = field(default="", metadata={"help": "collected held-out dataset (distill.collect output)"})
    target: str = field(default="default", metadata={"help": "target model"})
    rows: int = field(default=0, metadata={"help": "first N rows only (0 = all)"})
    spans: int = field(default=64, metadata={"help": "random spans for the copy test (0 = skip)"})
    span_len: int = field(default=24, metadata={"help": "tokens per random span"})
    max_seq_len: int = field(default=2048, metadata={"help": "prompt + response cut, as in training"})
    seed: int = field(default=0, metadata={"help": "random spans' seed"})

    def __post_init__(self):
        if not self.draft or not self.data:
            raise UserError("give --draft DRAFT_DIR and --data COLLECTED_HELDOUT_DIR")


def match_length(ctx: list[int], max_ngram: int = MAX_NGRAM) -> int:
    """Length of the longest suffix of ctx (up to max_ngram) that occurred earlier in ctx (0 = none)."""
    return longest_match(ctx, max_ngram)[1]


def summarise(records: list[tuple[int, bool, bool]], max_ngram: int = MAX_NGRAM) -> dict:
    """records: (match length, lookup right, draft right) per position -> the table the module docstring describes."""
    n = len(records)
    if not n:
        raise UserError("no response positions to probe: the dataset's rows have empty responses")
    out = {"positions": n, "draft_agreement": sum(d for _, _, d in records) / n, "by_min_match": {}}
    for k in range(1, max_ngram + 1):
        hit = [(g, d) for m, g, d in records if m >= k]
        out["by_min_match"][k] = {
            "share": len(hit) / n,
            "lookup_agreement": sum(g for g, _ in hit) / len(hit) if hit else None,
            "draft_agreement": sum(d for _, d in hit) / len(hit) if hit else None,
            "lookup_else_draft": sum(g if m >= k else d for m, g, d in records) / n,
        }
    return out


@torch.no_grad()
def _top1(student: Student, vocab: VocabMap | None, ex: list[dict]) -> tuple[torch.Tensor, dict]:
    """The draft's top-1 (target ids) at every response position of the examples, and the collated batch."""
    b = batches.collate(ex, vocab)
    pred = student(b["input_ids"], b["attention_mask"], b["sel"]).argmax(-1)  # (N,)
    return (vocab.targets(pred) if vocab is not None else pred), b


def probe(cfg: ProbeConfig) -> dict:
    target, tok = load_target(cfg.target)
    d = load_draft(cfg.draft, target, tok)
    student = Student(d.model.eval())
    vocab = VocabMap(d.vocab_map, target.config.vocab_size) if d.vocab_map is not None else None
    ds = load_collected(cfg.data)
    if cfg.rows:
        ds = ds.select(range(min(cfg.rows, len(ds))))
    records = []
    for e in batches.make_examples(ds, cfg.max_seq_len):
        pred, b = _top1(student, vocab, [e])
        want = b["target_top1"].tolist()
        ctx = e["input_ids"]
        for t, (p, y) in enumerate(zip(pred.tolist(), want)):
            upto = ctx[: e["start"] + t + 1]  # the context that predicts response token t
            end, m = longest_match(upto)  # the lookup's guess is upto[end + 1]
            records.append((m, m > 0 and upto[end + 1] == y, p == y))
    result = {"draft": cfg.draft, "data": cfg.data, **summarise(records)}
    if cfg.spans:
        result["random_span_copy"] = span_copy(target, student, vocab, ds, cfg)
    return result


@torch.no_grad()
def span_copy(target, student: Student, vocab: VocabMap | None, ds, cfg: ProbeConfig) -> dict:
    """Spans of random tokens (drawn from the data's response tokens, so the draft's vocabulary has them) shown
    twice: top-1 agreement with the *copy* on the second showing, for the target and for the draft."""
    rng = random.Random(cfg.seed)
    seen = sorted({t for r in ds["response_ids"] for t in r})
    got = {"target": 0, "draft": 0}
    n = 0
    for _ in range(cfg.spans):
        span = [rng.choice(seen) for _ in range(cfg.span_len)]
        ex = {"input_ids": span + span[:-1], "start": cfg.span_len - 1, "labels": span, "topk_ids": None,
              "topk_logprobs": None}
        pred, _ = _top1(student, vocab, [ex])
        logits = target(torch.tensor([ex["input_ids"]])).logits[0, cfg.span_len - 1:]  # (span_len, V)
        want = torch.tensor(span)
        got["draft"] += int((pred == want).sum())
        got["target"] += int((logits.argmax(-1) == want).sum())
        n += len(span)
    # the first token of the second showing cannot be copied (nothing precedes it twice); counted anyway, alike
    return {"spans": cfg.spans, "span_len": cfg.span_len, "target": got["target"] / n, "draft": got["draft"] / n}


def main(argv: list[str] | None = None) -> None:
    cfg, r = run_job(ProbeConfig, lambda cfg, argv: probe(cfg), argv, __doc__)
    print(f"{r['positions']} held-out positions; draft top-1 agreement {r['draft_agreement']:.3f}")
    print("min match | share | lookup there | draft there | lookup else draft")
    for k, s in r["by_min_match"].items():
        print(f"{k:9d} | {s['share']:.3f} | {_f(s['lookup_agreement'])} | {_f(s['draft_agreement'])} | "
              f"{s['lookup_else_draft']:.3f}")
    if "random_span_copy" in r:
        c = r["random_span_copy"]
        print(f"random spans shown twice ({c['spans']} x {c['span_len']}): target copies {c['target']:.3f}, "
              f"draft {c['draft']:.3f}")
    print(json.dumps({"config": asdict(cfg), **r}))


def _f(x) -> str:
    return "   –  " if x is None else f"{x:.3f}"


if __name__ == "__main__":
    main()
