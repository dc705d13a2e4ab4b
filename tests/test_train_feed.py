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


def test_batch_tokens_buckets_by_length_within_the_budget_and_batch_size_stays_as_it_was():
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 60, 200).tolist()
    for epoch in (0, 1):
        order = batches.batch_order(lengths, 8, 3, epoch, batch_tokens=120)
        assert sorted(i for b in order for i in b) == list(range(200))  # every example once an epoch
        assert all(len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 120 for b in order)
        assert order == batches.batch_order(lengths, 8, 3, epoch, batch_tokens=120)  # a resumed run repeats it
        assert len({len(b) for b in order}) > 2  # short examples in larger batches
        assert batches.batch_order(lengths, 8, 3, epoch) == batches.batch_order(lengths, 8, 3, epoch, batch_tokens=0)
        assert all(len(b) == 8 for b in batches.batch_order(lengths, 8, 3, epoch))  # 200 = 25 x 8


def test_a_run_trains_with_batch_tokens(tiny_collected, tmp_path, torch_single_thread):
    from decode import cli
    from distill.train import TrainConfig, train

    argv = ["--target", tiny_collected.target, "--data", tiny_collected.data, "--eval-data", tiny_collected.heldout,
            "--output", str(tmp_path / "run"), "--max-steps", "2", "--batch-tokens", "64", "--eval-rows", "2",
            "--warmup-steps", "1", "--report-to", "none", "--vocab", "512"]
    run = train(cli.parse(TrainConfig, argv), argv)
    assert (run / "checkpoint-000002" / "hf").is_dir()


def test_device_feed_hands_over_each_batch_once_in_order_with_its_host_copy():
    """DeviceFeed (issue 62): (host, device) pairs in the feed's order, the next one taken ahead only on CUDA (on a
    CPU it moves nothing); close() closes the feed under it."""
    import pytest

    from distill.train.device_feed import DeviceFeed

    closed = []

    class Feed:
        def __init__(self):
            self.it = iter([{"x": torch.tensor([i])} for i in range(3)])

        def __next__(self):
            return next(self.it)

        def close(self):
            closed.append(True)

    feed = DeviceFeed(Feed(), torch.device("cpu"))
    got = [next(feed) for _ in range(3)]
    assert [int(h["x"]) for h, _ in got] == [0, 1, 2] and all(torch.equal(h["x"], d["x"]) for h, d in got)
    with pytest.raises(StopIteration):
        next(feed)
    feed.close()
    assert closed == [True]


def test_zero2_bf16_trains_the_plain_run_s_layout():
    """Under ZeRO-1/2 bf16 is DeepSpeed's torch_autocast (float32 weights, bf16 autocast), the plain run's layout;
    ZeRO-3 and fp32 keep DeepSpeed's own settings (issue 62)."""
    from types import SimpleNamespace

    from distill.train.engine import deepspeed_settings

    cfg = SimpleNamespace(grad_accum=2, batch_size=4, grad_clip=1.0)
    for stage, precision, autocast in ((2, "bf16", True), (1, "bf16", True), (3, "bf16", False), (2, "no", False)):
        ds = {"zero_optimization": {"stage": stage}, "bf16": {"enabled": precision == "bf16"}}
        deepspeed_settings(ds, cfg, precision)
        assert ("torch_autocast" in ds) == autocast, (stage, precision)
        assert ds["bf16"]["enabled"] == (precision == "bf16" and not autocast)
    ds = {"zero_optimization": {"stage": 2}, "torch_autocast": {"enabled": False}}
    deepspeed_settings(ds, cfg, "bf16")
    assert ds["torch_autocast"] == {"enabled": False}  # a config that sets it wins
