"""Training examples from collected rows: labels and the teacher's top-k rows stay aligned position by position."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from distill.train import batches


def _row(prompt: list[int], response: list[int]) -> dict:
    # teacher row t starts with response token t, so alignment is checkable position by position
    return {"prompt_ids": prompt, "response_ids": response,
            "topk_ids": [[t, 7] for t in response], "topk_logprobs": [[-0.1, -2.5] for _ in response]}


def _aligned(ex: dict) -> bool:
    return len(ex["labels"]) == len(ex["topk_ids"]) and all(top[0] == y for y, top in zip(ex["labels"], ex["topk_ids"]))


def test_a_response_longer_than_max_seq_len_keeps_its_first_tokens_and_their_teacher_rows():
    response = list(range(1000, 2000))  # 1000 tokens, max_seq_len 512
    with pytest.warns(UserWarning, match=r"1 of 1 responses .* cut to their first 511 tokens.*--max-seq-len"):
        (ex,) = batches.make_examples([_row([1, 2, 3], response)], max_seq_len=512)
    assert ex["labels"] == response[:511] and _aligned(ex)
    assert len(ex["input_ids"]) == 511 and ex["input_ids"][: ex["start"] + 1] == [3]  # prompt + response = 512


def test_a_row_without_prompt_reads_its_first_response_token_as_context():
    response = list(range(50, 80))
    (ex,) = batches.make_examples([_row([], response)], max_seq_len=512)
    assert ex["input_ids"][0] == 50 and ex["labels"] == response[1:] and _aligned(ex)
    response = list(range(50, 650))  # and cut: the labels after the first token, their rows with them
    with pytest.warns(UserWarning):
        (ex,) = batches.make_examples([_row([], response)], max_seq_len=512)
    assert ex["labels"] == response[1:511] and _aligned(ex)


def test_responses_that_fit_are_untouched_and_do_not_warn():
    rows = [_row([1, 2, 3, 4], list(range(10, 20))), _row([5] * 600, list(range(30, 60)))]  # a long prompt is cut
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first, second = batches.make_examples(rows, max_seq_len=64)
    assert first["labels"] == list(range(10, 20)) and _aligned(first) and first["input_ids"][:4] == [1, 2, 3, 4]
    assert second["labels"] == list(range(30, 60)) and _aligned(second) and len(second["input_ids"]) == 63


# --- the collected dataset read in place (batches.Examples) ---------------------------------------------------


def _dataset(rows: list[dict], tmp_path):
    """rows saved in the collected format and loaded back memory-mapped, as load_collected gives them."""
    import datasets

    from distill.collect.shards import FEATURES

    full = [{"id": f"r{i}", "category": "c", "source": "target", **r} for i, r in enumerate(rows)]
    datasets.Dataset.from_list(full, features=FEATURES).save_to_disk(str(tmp_path / "ds"))
    return datasets.load_from_disk(str(tmp_path / "ds"))


def _rows() -> list[dict]:
    return [_row([1, 2, 3], list(range(1000, 1040))),  # cut at max_seq_len 24
            _row([], list(range(50, 60))),  # no prompt: the first response token is the context
            _row([4, 5], []),  # nothing to train
            _row([6] * 30, list(range(70, 75))),  # a long prompt, cut from the left
            _row([8], [9])]


def test_arrow_examples_collate_exactly_as_the_list_examples(tmp_path):
    import torch

    from decode.models.draft_folder import VocabMap

    ds = _dataset(_rows(), tmp_path)
    with pytest.warns(UserWarning, match="1 of 5 responses"):
        listed = batches.make_examples(ds, max_seq_len=24)  # Python lists of each row, as training used to hold
    with pytest.warns(UserWarning, match="1 of 5 responses"):
        ex = batches.Examples.index(ds, max_seq_len=24)
    assert len(ex) == len(listed) == 4 and ex.lengths.tolist() == [len(e["input_ids"]) for e in listed]
    vocab = VocabMap(list(range(0, 2000, 3)), 2000)  # a reduced vocabulary: a third of the ids
    for idx in ([0], [3, 1], [2, 0, 1, 3]):
        for v in (None, vocab):
            got, want = batches.collate(ex.take(idx), v), batches.collate([listed[i] for i in idx], v)
            assert got.keys() == want.keys()
            for k in want:
                assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k


def test_arrow_labels_teacher_rows_and_inputs_line_up_position_by_position_past_max_seq_len(tmp_path):
    response = list(range(1000, 1300))  # 300 tokens, max_seq_len 64
    ds = _dataset([_row([1, 2, 3], response), _row([], response)], tmp_path)
    with pytest.warns(UserWarning, match=r"2 of 2 responses .* first 63 tokens"):
        ex = batches.Examples.index(ds, max_seq_len=64)
    b = batches.collate(ex.take([0, 1]), None)
    ids, sel, T = b["input_ids"].flatten(), b["sel"], b["input_ids"].shape[1]
    assert b["labels"].tolist() == response[:63] + response[1:63]
    for t in range(len(sel)):  # position sel[t] predicts labels[t], scored against teacher row t, fed next
        assert b["topk_ids"][t, 0] == b["labels"][t] == b["target_top1"][t]
        if t + 1 < len(sel) and sel[t + 1] == sel[t] + 1 and sel[t + 1] // T == sel[t] // T:  # the same row
            assert ids[sel[t] + 1] == b["labels"][t]
    assert b["input_ids"][0, :1].tolist() == [3] and b["input_ids"][1, 0] == response[0]


def test_indexing_a_dataset_reads_no_token_or_top_k_row_into_python(tmp_path):
    """2,000 rows x 200 tokens x top-16: listing them (the old make_examples) took ~300 MB of Python objects."""
    import tracemalloc

    ds = _dataset([_row([1] * 20, list(range(i, i + 200))) for i in range(2000)], tmp_path)
    tracemalloc.start()
    ex = batches.Examples.index(ds, max_seq_len=512)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(ex) == 2000 and peak < 2 * 2**20, peak  # lengths only: ~20 bytes an example
    (e,) = ex.take([1999])
    assert e["labels"].tolist() == list(range(1999, 2199)) and e["topk_ids"].shape == (200, 2)


@pytest.mark.parametrize("workers", [0, 1])
def test_the_feed_gives_every_step_the_same_batches_from_any_first_step(tmp_path, workers):
    import functools

    import torch

    ds = _dataset([_row([1, 2], list(range(10 + i, 20 + 2 * i))) for i in range(10)], tmp_path)
    ex = batches.Examples.index(ds, max_seq_len=64)
    order = functools.lru_cache()(lambda epoch: batches.batch_order(ex.lengths.tolist(), 3, 0, epoch))

    def run(first_step: int) -> list[dict]:
        feed = batches.feed(batches.StepBatches(ex, order, None, first_step, 6, 2, 1, 0), workers)
        try:
            return list(feed)
        finally:
            feed.close()

    whole, resumed = run(0), run(4)
    assert len(whole) == 12 and len(resumed) == 4  # 6 steps x 2 micro-batches; steps 4 and 5 on resume
    for got, want in zip(resumed, whole[8:]):
        assert all(torch.equal(got[k], want[k]) for k in want)
    direct = [batches.collate(ex.take(batches.batch_indices(order, s, 2, 1, 0, m)), None) for s in range(6) for m in range(2)]
    assert all(torch.equal(a[k], b[k]) for a, b in zip(whole, direct) for k in b)


def test_an_error_while_collating_reaches_the_loop():
    feed = batches.Prefetch((1 / x for x in (1, 0)), depth=2)
    assert next(feed) == 1
    with pytest.raises(ZeroDivisionError):
        next(feed)
    feed.close()


def test_token_rows_count_on_disk_what_the_lists_hold(tmp_path, monkeypatch):
    """The draft's build reads token frequencies and a few rows from disk: the same vocabulary as from lists."""
    from distill.train.designs import frequent_tokens

    rows = _rows()
    seqs = [r["prompt_ids"] + r["response_ids"] for r in rows]
    monkeypatch.setattr(batches.TokenRows, "CHUNK", 2)  # several chunks
    on_disk = batches.TokenRows(_dataset(rows, tmp_path))
    assert len(on_disk) == len(seqs) and on_disk[:3] == seqs[:3]
    want = np.bincount([t for s in seqs for t in s])
    assert np.array_equal(on_disk.counts(1)[: len(want)], want) and not on_disk.counts(1)[len(want):].any()
    for n in (3, 7, len(want) + 5):
        assert frequent_tokens(on_disk, n, [2]) == frequent_tokens(seqs, n, [2])
