"""Self-written prompts (Magpie, arXiv 2406.08464): a target with a chat template writes the user turns itself.

    python -m distill.collect --prompts self:2000 --output OUT       # OUT/self-prompts.jsonl, then answers on it
    python -m distill.collect --prompts self:2000:temperature=0.9,seeds=my.jsonl,attempts=5 --output OUT

How: render the chat template for one user turn whose content is a sentinel, cut the text right before the
sentinel (the "pre-query", with the system prompt when the template adds one), and let the target sample a
continuation until its end-of-turn token. Each continuation is a candidate user prompt; it is rejected as
  truncated   it reached max_tokens without the end-of-turn token
  short       fewer than min_words words (or empty)
  heldout     near-duplicate of a bundled held-out prompt (the evaluation set never leaks into training data)
  duplicate   near-duplicate of a prompt already accepted (MinHash + LSH over word 3-grams, exact Jaccard check)
  quota       its category already holds its share of N
Categories come from a seed prompt set (default: the bundled train set): a candidate takes the majority category
of its k nearest seed prompts (cosine of the target's mean-pooled last hidden state); the quota of a category is
N x its share of the seeds. When `attempts` x N candidates did not fill every quota, the most confident
over-quota candidates fill the rest (`filled` in the stats). Options after `self:N:` are SelfOptions' fields.

Files in OUT (a kill at any moment and the same command continue where it stopped):
  self-prompts.settings.json   what these prompts are; a rerun with other settings is refused
  self-prompts.jsonl           the accepted prompts, a prompt file: {"id", "category", "messages": [user turn]}
  self-prompts.log.jsonl       one line per finished batch (ids accepted, rejections, over-quota candidates,
                               tokens, seconds): a prompt counts only once its batch's line is complete
  self-prompts.seeds.npz       the classifier's seed and held-out embeddings, computed once
  self-prompts.json            the stats, written once the prompts are finished
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch

from decode.drafting.sampling import SamplingParams
from decode.errors import UserError
from decode.models.targets import eos_ids, load_target
from distill.collect import kv_budget, shards
from distill.collect.categories import Classifier, embed, quotas, user_text
from distill.collect.generation import generate_batch
from distill.collect.near_duplicates import MinHashIndex
from distill.prompts import load_prompts

PREFIX = "self:"
SENTINEL = "SPECDISTILLUSERTURNSENTINEL"  # letters only: no template escapes, strips or splits it
FILE, LOG, SETTINGS, SEEDS, STATS = ("self-prompts.jsonl", "self-prompts.log.jsonl", "self-prompts.settings.json",
                                     "self-prompts.seeds.npz", "self-prompts.json")
NO_CATEGORY = "self"
REASONS = ("truncated", "short", "heldout", "duplicate", "quota")


@dataclass(frozen=True)
class SelfOptions:
    """`--prompts self:N[:key=value,...]`; every default is here, once."""
    n: int
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature (> 0: greedy writes one prompt)"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling (1 = off)"})
    max_tokens: int = field(default=256, metadata={"help": "longest prompt in tokens; longer ones are truncated"})
    min_words: int = field(default=3, metadata={"help": "shorter prompts are rejected"})
    dedup: float = field(default=0.7, metadata={"help": "Jaccard of word 3-gram sets at which two are duplicates"})
    seeds: str = field(default="train", metadata={"help": "prompt set whose categories and shares to match; none = no"})
    knn: int = field(default=5, metadata={"help": "seed prompts that vote on a candidate's category"})
    attempts: int = field(default=10, metadata={"help": "candidates written at most, x N"})

    def __post_init__(self):
        if self.n < 1:
            raise UserError(f"--prompts self:N needs N >= 1 (prompts the target writes), got {self.n}")
        if self.temperature <= 0:
            raise UserError(f"--prompts self: temperature must be > 0 (greedy writes one prompt), got {self.temperature}")
        SamplingParams(self.temperature, 0, self.top_p)
        for name in ("max_tokens", "min_words", "knn", "attempts"):
            if getattr(self, name) < 1:
                raise UserError(f"--prompts self: {name} must be >= 1, got {getattr(self, name)}")
        if not 0 < self.dedup <= 1:
            raise UserError(f"--prompts self: dedup must be in (0, 1] (a Jaccard similarity), got {self.dedup}")


def is_self(spec) -> bool:
    """True for `self:N...`: prompts the target writes, not a prompt set to load."""
    return isinstance(spec, str) and spec.startswith(PREFIX)


def parse(spec: str, mode: str = "generate") -> SelfOptions:
    """`self:N` or `self:N:key=value,...` -> SelfOptions; a bad spec is one line naming the fix."""
    usage = "give --prompts self:N with N >= 1 (e.g. self:2000), options as self:N:key=value,..."
    if mode != "generate":
        raise UserError("--mode score teacher-forces given responses and self-written prompts have none; use "
                        "--mode generate with --prompts self:N")
    head, _, rest = spec[len(PREFIX):].partition(":")
    try:
        n = int(head)
    except ValueError:
        raise UserError(f"--prompts {spec!r}: {head!r} is not a number of prompts; {usage}") from None
    types = {f.name: f.type for f in fields(SelfOptions) if f.name != "n"}
    kw = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if key not in types or not eq:
            raise UserError(f"--prompts {spec!r}: unknown option {item!r}; give self:N:key=value,... with keys "
                            f"{sorted(types)}")
        try:
            kw[key] = {"int": int, "float": float}.get(types[key], str)(value)
        except ValueError:
            raise UserError(f"--prompts {spec!r}: {key} must be {types[key]}, got {value!r}") from None
    return SelfOptions(n, **kw)


def pre_query_ids(tok) -> list[int]:
    """The chat template up to where a user turn's content starts, as token ids (the template text holds its own
    special tokens, so no BOS is added: apply_chat_template(tokenize=True) does the same)."""
    if not getattr(tok, "chat_template", None):
        raise UserError("--prompts self:N needs a target whose tokenizer has a chat template (it writes a user turn "
                        "after the template's user prefix); give --prompts FILE (a JSONL prompt file) instead")
    text = tok.apply_chat_template([{"role": "user", "content": SENTINEL}], tokenize=False)
    cut = text.find(SENTINEL)
    if cut < 0:
        raise UserError("--prompts self:N: the target's chat template does not show a user turn's content as "
                        "given; give --prompts FILE (a JSONL prompt file) instead")
    return tok(text[:cut], add_special_tokens=False)["input_ids"]


def check(spec: str, tok) -> None:
    """What the pipeline checks before its first stage: the spec parses and the target can write prompts."""
    parse(spec)
    pre_query_ids(tok)


# --- categories ---------------------------------------------------------------------------------------------------


def build_classifier(opts: SelfOptions, model, tok, out: Path):
    """(classifier or None, quotas, accuracy on the held-out prompts of the seed categories or None)."""
    seeds = [] if opts.seeds == "none" else load_prompts(opts.seeds)
    counts: dict[str, int] = {}
    for r in seeds:
        counts[r["category"]] = counts.get(r["category"], 0) + 1
    if len(counts) < 2:  # nothing to balance: every prompt is "self"
        return None, {NO_CATEGORY: opts.n}, None
    test = [r for r in load_prompts("heldout") if r["category"] in counts]
    seed_emb, test_emb = _embeddings(model, tok, [user_text(r) for r in seeds], [user_text(r) for r in test], out)
    clf = Classifier(seed_emb, [r["category"] for r in seeds], opts.knn)
    accuracy = None
    if test:
        pred, _ = clf.predict(test_emb)
        accuracy = round(float(np.mean([p == r["category"] for p, r in zip(pred, test)])), 4)
    return clf, quotas(opts.n, counts), accuracy


def _embeddings(model, tok, seeds: list[str], test: list[str], out: Path) -> tuple[np.ndarray, np.ndarray]:
    """Seed and held-out embeddings, cached in OUT (minutes on a CPU for a large seed set; a resume reuses them)."""
    key = hashlib.sha256(json.dumps([shards.tokenizer_fingerprint(tok), seeds, test]).encode()).hexdigest()
    path = out / SEEDS
    if path.is_file():
        with np.load(path, allow_pickle=False) as z:
            if str(z["key"]) == key:
                return z["seeds"], z["test"]
    both = embed(model, tok, seeds + test)
    tmp = out / f".{SEEDS}.{os.getpid()}.npz"
    np.savez(tmp, key=key, seeds=both[:len(seeds)], test=both[len(seeds):])
    os.replace(tmp, path)
    return both[:len(seeds)], both[len(seeds):]


# --- the files in OUT ---------------------------------------------------------------------------------------------


def _complete_lines(path: Path) -> list[dict]:
    """The JSON lines of a file up to the first torn one (a kill mid-append leaves at most one, at the end)."""
    rows = []
    for line in path.read_bytes().split(b"\n")[:-1] if path.is_file() else []:
        try:
            rows.append(json.loads(line))
        except ValueError:
            break
    return rows


def _rewrite(path: Path, rows: list[dict]) -> None:
    """Replace a file by exactly these lines, atomically (a resume drops a torn tail or an unlogged batch)."""
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    if not path.is_file() or path.read_bytes() != data:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)


def resume(out: Path) -> tuple[list[dict], list[dict]]:
    """(accepted rows, batch log) as of the last complete batch line; both files cut back to match."""
    log = _complete_lines(out / LOG)
    counted = {i for e in log for i in e["ids"]}
    rows = [r for r in _complete_lines(out / FILE) if r["id"] in counted]
    _rewrite(out / LOG, log)
    _rewrite(out / FILE, rows)
    return rows, log


def _append(out: Path, rows: list[dict], entry: dict) -> None:
    """The batch's prompts, then its log line: each one write, so a kill leaves at most a torn last line, and a
    prompt whose log line is not complete is not counted (resume drops it and writes the batch again)."""
    for name, lines in ((FILE, rows), (LOG, [entry])):
        with open(out / name, "ab") as f:
            f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines).encode())
            f.flush()
            os.fsync(f.fileno())


# --- writing ------------------------------------------------------------------------------------------------------


class Judge:
    """Accepts or rejects candidates against everything accepted so far (rebuilt from the file on resume)."""

    def __init__(self, opts: SelfOptions, clf, quota: dict[str, int], rows: list[dict]):
        self.opts, self.clf, self.quota = opts, clf, quota
        self.heldout = MinHashIndex(opts.dedup)
        for r in load_prompts("heldout"):
            self.heldout.add(user_text(r))
        self.index = MinHashIndex(opts.dedup)
        self.counts = dict.fromkeys(quota, 0)
        self.rows: list[dict] = []
        for r in rows:
            self._accept(user_text(r), r["category"], r)

    def _accept(self, text: str, cat: str, row: dict | None = None) -> dict:
        width = max(6, len(str(self.opts.n)))
        row = row or {"id": f"self-{len(self.rows) + 1:0{width}d}", "category": cat,
                      "messages": [{"role": "user", "content": text}]}
        self.index.add(text)
        self.counts[cat] = self.counts.get(cat, 0) + 1
        self.rows.append(row)
        return row

    def classify(self, texts: list[str], model, tok) -> tuple[list[str], list[float]]:
        if self.clf is None or not texts:
            return [NO_CATEGORY] * len(texts), [1.0] * len(texts)
        cats, conf = self.clf.predict(embed(model, tok, texts))
        return cats, [round(float(c), 4) for c in conf]

    def batch(self, cands: list[tuple[str, bool]], model, tok) -> tuple[list[dict], dict]:
        """(rows accepted, the batch's log entry: ids, rejections per reason, over-quota candidates)."""
        rejected = dict.fromkeys(REASONS, 0)
        survivors = []
        for text, truncated in cands:  # the cheap checks first: only survivors pay for a forward pass
            reason = ("truncated" if truncated else "short" if len(text.split()) < self.opts.min_words
                      else "heldout" if self.heldout.near(text) else None)
            if reason:
                rejected[reason] += 1
            else:
                survivors.append(text)
        new, overflow = [], []
        for text, cat, conf in zip(survivors, *self.classify(survivors, model, tok)):
            if self.index.near(text):  # in order: a later near-copy in the same batch is caught too
                rejected["duplicate"] += 1
            elif self.counts.get(cat, 0) >= self.quota[cat]:  # quotas sum to N: all full = N accepted
                rejected["quota"] += 1
                overflow.append({"prompt": text, "category": cat, "confidence": conf})
            else:
                new.append(self._accept(text, cat))
        return new, {"ids": [r["id"] for r in new], "rejected": rejected, "overflow": overflow}

    def fill(self, overflow: list[dict]) -> list[dict]:
        """Up to N from over-quota candidates: each time the category least over its quota, its most confident one
        (near-duplicates of anything accepted skipped), so the mix stays as close to the seeds' as it can."""
        left: dict[str, list[dict]] = {}
        for o in sorted(overflow, key=lambda o: -o["confidence"]):
            left.setdefault(o["category"], []).append(o)
        new = []
        while len(self.rows) < self.opts.n and any(left.values()):
            # (count + 1) / (quota + 1): how far over its share a category is, also for a quota of 0
            cat = min((c for c in left if left[c]), key=lambda c: ((self.counts[c] + 1) / (self.quota[c] + 1), c))
            o = left[cat].pop(0)
            if not self.index.near(o["prompt"]):
                new.append(self._accept(o["prompt"], cat))
        return new


def candidates(model, tok, prefix: list[int], opts: SelfOptions, size: int, seed: int, batch: int,
               eos: set[int], pad: int) -> tuple[list[tuple[str, bool]], int]:
    """`size` continuations of the pre-query: ([(text, truncated)], tokens generated). Batch b samples from its own
    seeded stream, so a resumed run writes the batches an uninterrupted one would have."""
    gen = torch.Generator(device=str(model.device)).manual_seed(seed * 1_000_003 + batch)
    sampling = SamplingParams(opts.temperature, 0, opts.top_p)
    res = generate_batch(model, [prefix] * size, opts.max_tokens, sampling, 0, eos, pad, generator=gen)
    out = []
    for g in res:
        ended = bool(g.response_ids) and g.response_ids[-1] in eos  # else it stopped at max_tokens: truncated
        ids = g.response_ids[:-1] if ended else g.response_ids
        out.append((tok.decode(ids, skip_special_tokens=True).strip(), not ended))
    return out, sum(len(g.response_ids) for g in res)


def settings(opts: SelfOptions, target: str, tok, seed: int) -> dict:
    """What makes two runs write the same prompts (the batch size may change on resume)."""
    return {**asdict(opts), "target": target, "tokenizer": shards.tokenizer_fingerprint(tok), "seed": seed}


def write(opts: SelfOptions, model, tok, out: Path, target: str, seed: int = 0, batch_size: int = 64) -> dict:
    """Write OUT/self-prompts.jsonl (or finish it: resumable); returns the stats (also OUT/self-prompts.json)."""
    prefix = pre_query_ids(tok)
    limit = model.config.max_position_embeddings
    if len(prefix) + opts.max_tokens > limit:
        raise UserError(f"--prompts self: the chat template's user prefix ({len(prefix)} tokens) plus max_tokens="
                        f"{opts.max_tokens} exceeds the target's context of {limit}; lower max_tokens")
    shards.guard_settings(out, settings(opts, target, tok, seed), name=SETTINGS, what="self-written prompts")
    rows, log = resume(out)
    done = len(rows) >= opts.n or any(e.get("fill") for e in log)
    if done and (out / STATS).is_file():
        return json.loads((out / STATS).read_text())
    clf, quota, accuracy = build_classifier(opts, model, tok, out)
    judge = Judge(opts, clf, quota, rows)
    eos = set(eos_ids(model, tok))
    pad = tok.pad_token_id if tok.pad_token_id is not None else min(eos)
    cap, generated = opts.attempts * opts.n, sum(e["generated"] for e in log)
    while len(judge.rows) < opts.n and generated < cap:
        t0, size = time.perf_counter(), min(batch_size, cap - generated)
        cands, tokens = candidates(model, tok, prefix, opts, size, seed, len(log), eos, pad)
        new, entry = judge.batch(cands, model, tok)
        entry.update(batch=len(log), generated=len(cands), tokens=tokens, seconds=round(time.perf_counter() - t0, 3))
        _append(out, new, entry)
        log.append(entry)
        generated += len(cands)
        print(f"self prompts: {len(judge.rows)}/{opts.n} accepted of {generated} written", file=sys.stderr, flush=True)
    if len(judge.rows) < opts.n and not any(e.get("fill") for e in log):
        new = judge.fill([o for e in log for o in e.get("overflow", ())])
        entry = {"fill": True, "ids": [r["id"] for r in new], "generated": 0, "tokens": 0, "seconds": 0.0}
        _append(out, new, entry)
        log.append(entry)
    stats = summarize(opts, judge, log, accuracy)
    shards.write_json_atomic(out / STATS, stats)
    _say(stats, out)
    return stats


def summarize(opts: SelfOptions, judge: Judge, log: list[dict], accuracy: float | None) -> dict:
    generated = sum(e["generated"] for e in log)
    seconds, tokens = sum(e["seconds"] for e in log), sum(e["tokens"] for e in log)
    filled = sum(len(e["ids"]) for e in log if e.get("fill"))
    return {
        "n": opts.n, "generated": generated, "accepted": len(judge.rows), "filled_from_overflow": filled,
        "acceptance_rate": round((len(judge.rows) - filled) / max(generated, 1), 4),
        "rejected": {r: sum(e["rejected"][r] for e in log if "rejected" in e) for r in REASONS},
        "categories": dict(sorted(judge.counts.items())), "quotas": judge.quota,
        "classifier": {"method": f"{opts.knn}-nearest seed prompts, cosine of the mean-pooled last hidden state",
                       "seeds": opts.seeds, "heldout_accuracy": accuracy},
        "seconds": round(seconds, 2), "prompts_per_s": round(len(judge.rows) / max(seconds, 1e-9), 3),
        "tokens": tokens, "tokens_per_s": round(tokens / max(seconds, 1e-9), 1),
        "options": asdict(opts),
    }


def _say(stats: dict, out: Path) -> None:
    """One line of what happened, and a warning when the quotas (or N) could not be met."""
    print(f"self prompts: {stats['accepted']}/{stats['n']} in {out / FILE} ({stats['generated']} written, "
          f"rejected {stats['rejected']}, classifier held-out accuracy {stats['classifier']['heldout_accuracy']})",
          file=sys.stderr, flush=True)
    if stats["filled_from_overflow"]:
        print(f"warning: the categories did not fill in {stats['generated']} attempts; {stats['filled_from_overflow']} "
              "prompts are over-quota candidates of other categories", file=sys.stderr)
    if stats["accepted"] < stats["n"]:
        print(f"warning: only {stats['accepted']} usable prompts of {stats['n']} asked; raise attempts "
              "(self:N:attempts=...) for more", file=sys.stderr)


def prompt_rows(opts: SelfOptions, cfg, world: int, target, tok) -> list[dict]:
    """distill.collect's hook: write (or finish) the prompts in cfg.output, then load them as a prompt file.
    `target`: the loaded HF model, or a stand-in without weights (the vLLM engine), then one is loaded here."""
    out = Path(cfg.output)
    shards.guard_settings(out, settings(opts, cfg.target, tok, cfg.seed), name=SETTINGS, what="self-written prompts")
    stats = json.loads((out / STATS).read_text()) if (out / STATS).is_file() else None  # written once finished
    if stats is None and world > 1:  # ranks appending to one file would interleave their batches
        raise UserError("--prompts self:N writes its prompts in one process: run the same command once without a "
                        f"launcher, then launch again on --output {out} (the ranks then share those prompts)")
    if stats is None:
        stand_in = not isinstance(target, torch.nn.Module)  # the vLLM engine's: no weights, so load them here
        model = load_target(cfg.target, cfg.dtype, cfg.device)[0] if stand_in else target
        stats = write(opts, model, tok, out, cfg.target, cfg.seed, kv_budget.auto_rows(model.device, cfg.batch_size))
        if stand_in:  # its memory back before vLLM takes the GPU
            del model
            gc.collect()
            torch.cuda.empty_cache()
    if not stats["accepted"]:
        raise UserError(f"the target wrote no usable prompt in {stats['generated']} attempts; raise attempts "
                        "(self:N:attempts=...) or the temperature, or give --prompts FILE")
    return load_prompts(str(out / FILE), categories=cfg.categories or None, limit=cfg.limit)
