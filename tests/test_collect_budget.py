"""Collection sized from memory (distill/collect/kv_budget.py, issue 62): the plan gives each batch the most rows
whose KV buffers and prefill fit the budget, a prompt that fits nowhere is a one-line error, and a mixed 100- to
8,000-token prompt set collected within a small budget holds no more K/V than it and writes what one unbudgeted
batch writes."""

from __future__ import annotations

import json

import pytest
import torch

from decode.errors import UserError
from decode.models.targets import load_tokenizer
from distill.collect import CollectConfig, kv_budget, llama_steps, run
from distill.collect.shards import load_collected

pytestmark = pytest.mark.usefixtures("torch_single_thread")

LENGTHS = (100, 8000, 420, 2600, 130, 1500, 5200, 700)  # prompt tokens ("word " x n is n tokens + 1 here)
NEW = 6


def test_each_batch_holds_the_most_rows_that_fit_its_longest_prompt():
    cost = kv_budget.RowCost(kv_position=10, act_token=5, mask_byte=0, scratch=0)  # a row: 10 B a position
    # at 1,000 prompt tokens + 24 new: 10,240 B of KV a row, and 15,000 B to prefill one row
    budget = 15_000 + 3 * 10_240
    assert kv_budget.rows_that_fit(cost, budget, 1000, 24, cap=64) == 3
    assert kv_budget.rows_that_fit(cost, budget, 1000, 24, cap=2) == 2
    # longest first: 3 rows at 1,000 tokens, then the shorter ones more to a batch, up to the cap
    assert kv_budget.plan_batches([1000, 1000, 1000, 200, 200, 200, 200, 100, 100], 24, 4, cost, budget) == [3, 4, 2]
    assert kv_budget.prefill_rows(cost, budget, 3, 1000) == 1  # the prefill gets what the buffers leave
    assert kv_budget.prefill_rows(cost, 10**9, 64, 1000) == 64  # room for all: one forward, as before
    with pytest.raises(UserError, match=r"prompt of 9000 tokens \+ 24 new ones needs .* raise --kv-budget-gb"):
        kv_budget.plan_batches([9000], 24, 4, cost, budget)


@pytest.fixture(scope="module")
def long_target(tmp_path_factory, tiny_llama):
    tok = load_tokenizer("default")
    path = tmp_path_factory.mktemp("target")
    model = tiny_llama(0, vocab=len(tok), tie_word_embeddings=True, max_position_embeddings=8192)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path, model


def collect(out, prompts, target, **kw) -> dict:
    run(CollectConfig(target=str(target), prompts=str(prompts), output=str(out), max_new_tokens=NEW, topk=4,
                      chat_template=False, **kw))
    return json.loads((out / "collect.json").read_text())


def test_a_mixed_8k_prompt_set_stays_within_its_kv_budget_and_writes_the_same(long_target, tmp_path):
    target, model = long_target
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{n}", "category": "raw", "prompt": "word " * n}) + "\n"
                               for n in LENGTHS))
    cost = llama_steps.row_cost(model)
    budget = 2 * cost.kv_row(8001 + NEW) + cost.prefill(8001)  # room for two rows at the longest
    whole = collect(tmp_path / "whole", prompts, target, batch_size=len(LENGTHS), kv_budget_gb=1.0)
    small = collect(tmp_path / "small", prompts, target, batch_size=len(LENGTHS), kv_budget_gb=budget / 2**30)
    assert whole["largest_batch"] == len(LENGTHS) and whole["kv_peak_bytes"] > budget  # the budget binds
    assert small["kv_peak_bytes"] <= small["kv_budget_bytes"] <= budget
    assert small["shards"] >= 2 and small["largest_batch"] < len(LENGTHS) and small["eager_fallbacks"] == 0
    rows = [{r["id"]: r for r in load_collected(tmp_path / name).to_list()} for name in ("whole", "small")]
    assert rows[0].keys() == rows[1].keys() == {f"p{n}" for n in LENGTHS}
    for i, a in rows[0].items():
        b = rows[1][i]
        assert a["response_ids"] == b["response_ids"] and a["topk_ids"] == b["topk_ids"], i
        assert torch.allclose(torch.tensor(a["topk_logprobs"]), torch.tensor(b["topk_logprobs"]), atol=1e-3), i
