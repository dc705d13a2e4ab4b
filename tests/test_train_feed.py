"""The training feed (issue 38): collate pads vectorised and keeps 2-byte tensors 2-byte; feed_bench times collate +
host-to-device over a collection and prints tokens/s."""

import re

import numpy as np
import torch

from distill.train import batches, feed_bench


def _examples(rng, feature_dtype):
    out = []
    for length, n in ((7, 3), (2, 1), (11, 6)):
        f = rng.standard_normal((length, 5)).astype(np.float32)
        out.append({"input_ids": rng.integers(1, 100, length), "start": length - n, "labels": rng.integers(1, 100, n),
                    "topk_ids": rng.integers(0, 100, (n, 4)),
                    "topk_logprobs": (-rng.random((n, 4))).astype(np.float16),
                    "features": torch.from_numpy(f).to(feature_dtype) if feature_dtype is torch.bfloat16
                    else f.astype(np.float16)})
    return out


def test_collate_pads_as_the_per_example_rule_and_keeps_two_byte_tensors_two_byte():
    rng = np.random.default_rng(0)
    for feature_dtype in (torch.bfloat16, torch.float16):
        ex = _examples(rng, feature_dtype)
        b = batches.collate(ex, None, pad_id=0)
        T = 11
        for i, e in enumerate(ex):  # the rule, example by example
            L = len(e["input_ids"])
            assert b["input_ids"][i, :L].tolist() == list(e["input_ids"]) and not b["input_ids"][i, L:].any()
            assert b["attention_mask"][i].tolist() == [1] * L + [0] * (T - L)
            assert torch.equal(b["features"][i, :L], torch.as_tensor(e["features"]))
            assert not b["features"][i, L:].any()
        want_sel = np.concatenate([i * T + e["start"] + np.arange(len(e["labels"])) for i, e in enumerate(ex)])
        assert b["sel"].dtype == torch.int64 and b["sel"].tolist() == want_sel.tolist()
        assert b["features"].dtype == feature_dtype  # cast on the device (FeatureHead.fuse), not here
        assert b["topk_logprobs"].dtype == torch.float16  # as collected; the loss computes in float32
        assert torch.equal(b["topk_logprobs"].float(),
                           torch.from_numpy(np.concatenate([e["topk_logprobs"] for e in ex]).astype(np.float32)))


def test_feed_bench_prints_tokens_per_s_for_the_collection_and_wide_features(tiny_collected, capsys):
    got = feed_bench.main(["--data", tiny_collected.data, "--batches", "12", "--feature-width", "512", "--device", "cpu"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    m = re.fullmatch(r"feed_bench: ([\d,]+) tokens/s for (.+); ([\d,]+) tokens/s with 512-wide bf16 head features", last)
    assert m and m.group(2) == tiny_collected.data, last
    assert got["collection"]["tokens"] == got["features"]["tokens"] > 0
    assert all(v > 0 for v in got["tokens_per_s"].values())
