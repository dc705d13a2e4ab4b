"""The training data: collected rows loaded and split (5% held out by id, unless --eval-data), and examples over
them left on disk (batches.Examples), cut to --max-seq-len, which by default fits the longest response collected.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from decode.errors import UserError
from distill.collect.shards import (
    check_collection,
    collect_info,
    load_collected,
    split_sample_id,
    tokenizer_fingerprint,
)
from distill.train import batches, losses
from distill.train.config import batch_tokens

if TYPE_CHECKING:
    from distill.train.config import TrainConfig


@dataclass
class Data:
    """The collected rows, split; what the draft is built and trained from."""
    train: Any         # datasets.Dataset: prompt_ids, response_ids, topk_ids, topk_logprobs, ...
    heldout: Any       # the same columns: --eval-data, or 5% of --data by id
    infos: list[dict]  # collect_info() of each --data dir, in order (recorded in specdistill.json)


def load_data(cfg: TrainConfig, tok) -> Data:
    data_dirs = cfg.data if isinstance(cfg.data, list) else [cfg.data]
    for d, flag in [(d, "--data") for d in data_dirs] + ([(cfg.eval_data, "--eval-data")] if cfg.eval_data else []):
        info = collect_info(d, flag)
        if info.get("tokenizer") != tokenizer_fingerprint(tok):
            raise UserError(f"{d} was collected with another tokenizer (target {info.get('target')!r}); "
                            f"collect data with --target {cfg.target} or train against that target")
        check_collection(d)  # every shard loads and the rows are the ones collect.json counts
    infos = [collect_info(d) for d in data_dirs]
    ds = concatenate([load_collected(d) for d in data_dirs])
    if len(ds) == 0:
        raise UserError(f"{cfg.data} is empty")
    if cfg.eval_data:
        eval_ds = load_collected(cfg.eval_data)
    else:  # a fixed 5% by id, so it never moves between runs
        held = [i for i, x in enumerate(ds["id"]) if hash_id(x) % 20 == 0]
        eval_ds, ds = ds.select(held), ds.select(sorted(set(range(len(ds))) - set(held)))
    ds = first_tokens(ds, cfg.data_tokens) if cfg.data_tokens else ds
    needs_topk = any(cfg.loss.get(k, 0) > 0 for k in losses.NEEDS_TOPK)
    if needs_topk and not all(i.get("k") for i in infos):
        raise UserError(f"{cfg.data} has no top-k logprobs (collected with --topk 0); use --loss '{{ce: 1.0}}' or recollect")
    return Data(ds, eval_ds, infos)


def first_tokens(ds, n: int):
    """The rows of the first `n` response tokens, in a fixed order: every prompt's first answer, then its second
    (--samples), ...; within one, by prompt-id hash. A larger n keeps every row of a smaller one, and a small n
    spreads over the prompts instead of taking the longest-first order collection wrote."""
    ids = ds["id"]
    order = sorted(range(len(ids)), key=lambda i: (split_sample_id(ids[i])[1], hash_id(ids[i]), ids[i]))
    cumulative = np.cumsum(batches.row_lengths(ds)[1][order]) if order else np.zeros(1, np.int64)
    if n > cumulative[-1]:
        raise UserError(f"--data-tokens {n}: the training rows hold {int(cumulative[-1])} response tokens; collect "
                        f"more (--samples K, more prompts) or give --data-tokens <= {int(cumulative[-1])} (0 = all)")
    return ds.select(sorted(order[: int(np.searchsorted(cumulative, n)) + 1]))


def concatenate(parts):
    """Several collected datasets as one, on the columns every one of them has."""
    import datasets

    if len(parts) == 1:
        return parts[0]
    common = set.intersection(*(set(p.column_names) for p in parts))
    return datasets.concatenate_datasets([p.remove_columns(sorted(set(p.column_names) - common)) for p in parts])


def hash_id(x: str) -> int:
    """A stable (process-independent) hash of a row's prompt id: a prompt's several answers (--samples) share it,
    so they fall on the same side of the held-out split."""
    import zlib

    return zlib.crc32(split_sample_id(x)[0].encode())


# --- examples and their order


PROMPT_TOKENS = 512  # prompt tokens kept by default beside the longest response


def make_examples(cfg: TrainConfig, data: Data) -> tuple[batches.Examples, batches.Examples]:
    """(training examples, held-out examples) over the collected rows left on disk (batches.Examples): prompt +
    response token ids with the teacher's targets, read per micro-batch."""
    max_seq_len = cfg.max_seq_len or default_max_seq_len(cfg, data)
    train_ex = batches.Examples.index(data.train, max_seq_len)
    eval_ex = batches.Examples.index(data.heldout, max_seq_len)
    eval_ex = eval_ex.subset(range(min(cfg.eval_rows, len(eval_ex)))) if cfg.eval_rows else eval_ex
    # batches of similar length pad less; the proxy is a sum over rows
    eval_ex = eval_ex.subset(np.argsort(eval_ex.lengths, kind="stable"))
    if not len(train_ex):
        raise UserError(f"{cfg.data} has no rows with a response to train on")
    return train_ex, eval_ex


def default_max_seq_len(cfg: TrainConfig, data: Data) -> int:
    """The longest response the collections can hold + PROMPT_TOKENS: max_new_tokens from their collect.json
    (generated rows are never longer), or for scored rows (--mode score) the longest response stored."""
    infos = data.infos + ([collect_info(cfg.eval_data)] if cfg.eval_data else [])
    settings = [i.get("settings") or {} for i in infos]
    longest = max((s["max_new_tokens"] for s in settings if s.get("max_new_tokens")), default=0)
    if any(s.get("mode", "generate") != "generate" or not s.get("max_new_tokens") for s in settings):
        longest = max(longest, *(int(batches.row_lengths(d)[1].max(initial=0)) for d in (data.train, data.heldout)))
    return longest + PROMPT_TOKENS


def batch_order(cfg: TrainConfig, examples: batches.Examples):
    """epoch -> that epoch's batches of example indices (batches.batch_order: similar lengths, shuffled by seed
    and epoch; --batch-size examples each, or by --batch-tokens); the few epochs a run is in are cached."""
    lengths, budget = examples.lengths.tolist(), batch_tokens(cfg)
    return functools.lru_cache(maxsize=4)(lambda epoch: batches.batch_order(lengths, cfg.batch_size, cfg.seed, epoch,
                                                                            budget))


