"""Training parallel drafts (--parallel K, distill/train/parallel.py and parallel_batches.py): the packed layout
computes what decoding asks of each mask, conditional drop bounds the tokens an example packs, the accepted-length
weights are the hand-computed products, and a trained draft exports its mask where vLLM reads it, keeps its frozen
rows, resumes exactly and decodes the target's own output."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from decode import DecodeOptions, generate
from decode.errors import UserError
from decode.models.draft_folder import read_vocab_map
from decode.models.targets import load_draft, load_model
from distill.train import TrainConfig, parallel
from distill.train.parallel_batches import anchor_levels, collate, pack, visible
from tests.test_train import _argv, _losses, _train, _train_until

pytestmark = pytest.mark.usefixtures("torch_single_thread")

EXAMPLE = {"input_ids": list(range(10, 22)), "start": 4, "labels": list(range(15, 23)),  # n = 8 response tokens
           "topk_ids": None, "topk_logprobs": None}


def test_levels_are_nested_and_bounded():
    rng = np.random.default_rng(0)
    for n, block, keep in ((8, 4, 0.5), (50, 8, 0.5), (50, 8, 0.25), (3, 6, 1.0)):
        levels = anchor_levels(n, block, keep, rng)
        prev = set(range(n))
        for k, a in enumerate(levels, start=1):
            assert set(a) <= prev and all(j + k <= n - 1 for j in a)  # every lower level there; a label exists
            prev = set(a)
        # the bound parallel_batches states: at most n (keep + keep^2 + ...) + K - 1 masks
        assert sum(map(len, levels)) <= n * sum(keep ** k for k in range(1, block)) + block - 1


def test_a_mask_row_reads_its_anchor_and_its_own_lower_masks():
    p = pack(EXAMPLE, 3, 1.0, np.random.default_rng(0), mask=99)
    T, start = 12, 4
    assert p["input_ids"][:T].tolist() == EXAMPLE["input_ids"] and (p["input_ids"][T:] == 99).all()
    vis = visible(torch.from_numpy(p["anchor"])[None], torch.from_numpy(p["level"])[None])[0]
    for row in range(len(p["input_ids"])):
        k, a = int(p["level"][row]), int(p["anchor"][row])
        want = {s for s in range(len(p["input_ids"])) if (p["level"][s] == 0 and s <= a)
                or (k > 0 and p["anchor"][s] == a and 0 < p["level"][s] <= k)}
        assert set(vis[row].nonzero().flatten().tolist()) == want | {row}
        assert p["position_ids"][row] == a + k  # the position decoding gives mask k after the anchor
    # trained rows: level k of anchor j learns response token j + k; sel_prev points at level k-1 of the same anchor
    for i, (row, k, t) in enumerate(zip(p["sel"], p["sel_level"], p["teacher"])):
        assert t == p["anchor"][row] - start + k
        if k:
            prev = p["sel"][p["sel_prev"][i]]
            assert p["anchor"][prev] == p["anchor"][row] and p["sel_level"][p["sel_prev"][i]] == k - 1


def test_the_packed_forward_is_what_decoding_computes(tiny_llama):
    """Each mask row's logits equal a plain causal forward over [x_0 .. x_anchor, mask x k] (decoding's input), and
    each real row's the chain's: the 4D mask and the position ids together, on a padded batch of two."""
    model = tiny_llama(0, vocab=40)
    student = parallel.ParallelStudent(model, block=3, weights={"ce": 1.0})
    short = {**EXAMPLE, "input_ids": EXAMPLE["input_ids"][:8], "labels": EXAMPLE["labels"][:4]}
    batch = collate([EXAMPLE, short], None, 3, 0.6, np.random.default_rng(1), mask=39)
    mask = parallel.attention_bias(visible(batch["anchor"], batch["level"]), model.config, model.dtype)
    with torch.no_grad():
        h = model.model(input_ids=batch["input_ids"], attention_mask=mask, position_ids=batch["position_ids"])
        packed = model.lm_head(h.last_hidden_state)  # (B, L, V)
        for b in range(2):
            for row in range(int(batch["attention_mask"][b].sum())):
                a, k = int(batch["anchor"][b, row]), int(batch["level"][b, row])
                ids = batch["input_ids"][b, :a + 1].tolist() + [39] * k
                plain = model(input_ids=torch.tensor([ids])).logits[0, -1]
                torch.testing.assert_close(packed[b, row], plain, rtol=1e-4, atol=1e-4)
    loss, parts = student(batch["input_ids"], batch["attention_mask"], batch["sel"], targets=batch)
    assert loss.requires_grad and {"ce", "level0", "level1", "level2"} <= set(parts)


def test_accepted_weights_are_the_products_of_the_lower_levels():
    # two anchors: rows 0, 1 (level 0), 2, 3 (level 1 of each), 4 (level 2 of the first)
    level, prev = torch.tensor([0, 0, 1, 1, 2]), torch.tensor([-1, -1, 0, 1, 2])
    p_top1 = torch.tensor([0.5, 0.8, 0.4, 0.9, 0.7])
    ids = torch.tensor([[3], [4], [5], [-1], [6]])  # row 3's target token is outside the draft's vocabulary
    w = parallel.row_weights(level, prev, -p_top1.log(), ids, "accepted", 3)
    torch.testing.assert_close(w, torch.tensor([1.0, 1.0, 0.5, 0.8, 0.5 * 0.4]))
    assert parallel.row_weights(level, prev, None, ids, "uniform", 3).eq(1).all()


def test_the_mask_takes_an_id_the_data_never_holds():
    counts = np.array([5, 0, 3, 0, 0, 2])
    assert parallel.reserved_id(counts, 8, None, [7]) == 6  # ids 6, 7 never seen; 7 is special
    assert parallel.reserved_id(counts, 6, [4], []) == 3  # 4 taken by a reduced draft
    assert parallel.reserved_id(np.array([5, 1, 3]), 3, None, []) == 1  # all seen: the least frequent


@pytest.mark.parametrize("values, message", [
    ({"parallel": 1}, "--parallel 1"), ({"parallel": 3, "design": "feature_head"}, "standalone drafts"),
    ({"parallel": 3, "parallel_keep": 0.0}, "--parallel-keep"), ({"parallel_weight": "x"}, "--parallel-weight"),
    ({"parallel": 3, "weight_decay": 0.1}, "--weight-decay"), ({"parallel": 3, "lora_r": 4, "init": "pretrained:x"}, "LoRA"),
])
def test_options_that_cannot_work_are_refused(values, message):
    with pytest.raises(UserError, match=message):
        TrainConfig(**values)


@pytest.fixture(scope="module")
def runs(tiny_collected, tmp_path_factory):
    root = tmp_path_factory.mktemp("parallel")
    extra = ("--parallel", "3", "--freeze", "[embed]")
    out = {"full": _train(_argv(tiny_collected, root / "full", *extra)),
           "reduced": _train(_argv(tiny_collected, root / "reduced", *extra, "--vocab", "600",
                                   "--parallel-weight", "accepted"))}
    _train_until(_argv(tiny_collected, root / "resumed", *extra, "--vocab", "600", "--parallel-weight", "accepted"), 4)
    out["resumed"] = _train(_argv(tiny_collected, root / "resumed", *extra, "--vocab", "600",
                                  "--parallel-weight", "accepted"))
    return out


@pytest.mark.parametrize("form", ["full", "reduced"])
def test_export_names_the_mask_where_vllm_reads_it(runs, form, tiny_collected):
    hf = runs[form] / "checkpoint-000006" / "hf"
    config, meta = json.loads((hf / "config.json").read_text()), json.loads((hf / "specdistill.json").read_text())
    mask = config["mask_token_id"]
    assert config["pard_token"] == mask and meta["design"]["kind"] == "parallel" and meta["design"]["parallel"] == 3
    d2t = read_vocab_map(hf, config["vocab_size"])
    reserved = meta["design"]["mask_target_id"]
    if form == "full":
        assert d2t is None and mask == reserved and config["vocab_size"] == len(tiny_collected.tokenizer)
    else:
        assert len(d2t) == config["vocab_size"] == 601 and mask == 600 and d2t[mask] == reserved
        assert reserved not in d2t[:600]
    # --freeze embed: only the mask's row moved
    target = load_model(tiny_collected.target, "float32")[0]
    emb = load_file(hf / "model.safetensors")["model.embed_tokens.weight"]
    rows = torch.tensor(d2t[:600]) if d2t else torch.arange(emb.shape[0])
    keep = torch.ones(len(rows), dtype=torch.bool)
    if form == "full":
        keep[mask] = False
    torch.testing.assert_close(emb[:len(rows)][keep], target.model.embed_tokens.weight[rows][keep], rtol=0, atol=0)
    loss = [m for m in map(json.loads, (runs[form] / "metrics.jsonl").read_text().splitlines()) if "train/loss" in m]
    assert all("train/loss_level2" in m for m in loss)


def test_a_resumed_parallel_run_continues_exactly(runs):
    want, got = dict(_losses(runs["reduced"])), _losses(runs["resumed"])
    assert {s for s, _ in got} == set(range(1, 7))
    for step, loss in got:
        assert loss == pytest.approx(want[step], abs=1e-6), step


@pytest.mark.parametrize("form", ["full", "reduced"])
def test_the_trained_draft_decodes_the_targets_output(runs, form, tiny_collected):
    from distill.collect.shards import load_collected

    target, tok = load_model(tiny_collected.target, "float32")
    draft = load_draft(str(runs[form] / "checkpoint-000006" / "hf"), target, tok)
    for prompt in load_collected(tiny_collected.heldout)["prompt_ids"][:3]:
        want, _ = generate(target, None, prompt, 16)
        for options in (DecodeOptions(gamma=3), DecodeOptions(gamma=3, tree_nodes=4)):
            out, st = generate(target, draft.model, prompt, 16, options, vocab_map=draft.vocab_map)
            assert out == want and st.draft_forwards <= st.rounds + 1
