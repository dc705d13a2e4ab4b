"""Collection's batched generation (distill/collect/generation.py, llama_steps.py, outputs.py) against the plainest
reference: each prompt alone, the whole sequence re-run every step, no cache. Tokens and stored top-k must be the
reference's on the static llama steps and on any model's own forward; sampling, EOS and stop strings as before; a
step reads nothing from the device; the GPU's pooled, graph-replayed steps (stood in for on the CPU) too."""

from __future__ import annotations

import functools
import sys
from types import SimpleNamespace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import GPT2Config, GPT2LMHeadModel

from decode.drafting.sampling import SamplingParams
from decode.runners.graphs import GraphLlama
from distill.collect import generation, llama_steps, step_ops
from distill.collect.generation import generate_batch
from tests.graph_standin import RecordedGraph, count_ops, host_read

pytestmark = pytest.mark.usefixtures("torch_single_thread")

K, NEW = 6, 14
GREEDY = SamplingParams(0.0)


class Tok:
    """decode() of a stand-in tokenizer: each id as <id>."""

    @staticmethod
    def decode(ids):
        return "".join(f"<{i}>" for i in ids)


def prompts(vocab: int, lengths=(5, 9, 3, 12, 7, 1), seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]


@torch.no_grad()
def reference(model, prompt: list[int], eos: set[int], stops=()) -> tuple[list[int], list, list]:
    """One prompt, greedy, the whole sequence re-run at each step: (tokens, top-k ids, top-k logprobs)."""
    seq, toks, ids, lps = list(prompt), [], [], []
    for _ in range(NEW):
        logp = torch.log_softmax(model(torch.tensor([seq])).logits[0, -1].float(), -1)
        v, i = torch.topk(logp, K)
        toks.append(int(logp.argmax()))
        ids.append(i.tolist())
        lps.append(v.half().tolist())
        seq.append(toks[-1])
        if toks[-1] in eos or any(s in Tok.decode(toks[-16:]) for s in stops):
            break
    return toks, ids, lps


def tiny_gpt2(seed: int = 0, vocab: int = 97):
    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=512,
                                      initializer_range=0.5, bos_token_id=1, eos_token_id=2)).eval()


@pytest.fixture(params=["llama", "qwen2", "gpt2"])
def model(request, tiny_llama, tiny_qwen2):
    return {"llama": tiny_llama, "qwen2": tiny_qwen2, "gpt2": tiny_gpt2}[request.param](0)


def assert_like_reference(model, got, ps, eos, stops=()):
    for g, p in zip(got, ps):
        toks, ids, lps = reference(model, p, eos, stops)
        assert g.response_ids == toks
        assert g.topk_ids == ids
        assert torch.allclose(torch.tensor(g.topk_logprobs), torch.tensor(lps), atol=2e-3)


def test_greedy_tokens_and_topk_are_the_reference_s_and_eos_ends_a_row(model):
    assert llama_steps.supports(model) == (model.config.model_type != "gpt2")  # both step kinds are covered
    ps = prompts(model.config.vocab_size)
    free = generate_batch(model, ps, NEW, GREEDY, K, set(), 0)
    assert_like_reference(model, free, ps, set())
    eos = {free[1].response_ids[3], 40}  # a token row 1 writes: it ends there (and the rows that write it earlier)
    got = generate_batch(model, ps, NEW, GREEDY, K, eos, 0)
    assert_like_reference(model, got, ps, eos)
    assert len(got[1].response_ids) <= 4


def test_long_prompts_prefill_row_by_row_with_the_reference_s_result(tiny_llama, monkeypatch):
    """Past ROW_PREFILL tokens each row's prompt runs alone (no padding mask): same tokens and top-k."""
    model = tiny_llama(0)
    monkeypatch.setattr(llama_steps, "ROW_PREFILL", 8)  # the batch's longest prompt (12) is "long"
    ps = prompts(model.config.vocab_size)
    assert_like_reference(model, generate_batch(model, ps, NEW, GREEDY, K, set(), 0), ps, set())


def test_stop_strings_end_a_row_where_they_appear(tiny_llama):
    model = tiny_llama(0)
    ps = prompts(model.config.vocab_size)
    free = generate_batch(model, ps, NEW, GREEDY, K, set(), 0)
    stop = Tok.decode(free[2].response_ids[4:6])  # two tokens row 2 writes
    got = generate_batch(model, ps, NEW, GREEDY, K, set(), 0, (stop,), Tok())
    assert_like_reference(model, got, ps, set(), (stop,))
    assert len(got[2].response_ids) <= 6


def test_sampled_rows_match_the_model_s_own_forward_draw_for_draw(tiny_llama, monkeypatch):
    model, sampling = tiny_llama(0), SamplingParams(0.9, 20, 0.95)
    ps = prompts(model.config.vocab_size)
    static = generate_batch(model, ps, NEW, sampling, K, {5, 17}, 0, generator=torch.Generator().manual_seed(3))
    monkeypatch.setattr(llama_steps, "supports", lambda m: False)  # the same batch through HFSteps
    hf = generate_batch(model, ps, NEW, sampling, K, {5, 17}, 0, generator=torch.Generator().manual_seed(3))
    assert [g.response_ids for g in static] == [g.response_ids for g in hf]
    assert [g.topk_ids for g in static] == [g.topk_ids for g in hf]


READS = ("item", "tolist", "__bool__", "__int__", "__float__", "nonzero")


class HostReads(TorchDispatchMode):
    """Notes the ops that make the host wait for the device (tests/graph_standin.host_read), inside C++ ops too."""

    def __init__(self, seen: list):
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if host_read(func, args):
            self.seen.append((str(func), "aten"))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("sampling", [GREEDY, SamplingParams(0.9, 20, 0.95)])
def test_a_decode_step_reads_nothing_from_the_device(tiny_llama, monkeypatch, sampling):
    """Python-level reads (.item(), .tolist(), bool(), ...) and ops that wait for the device, greedy and sampled."""
    model, reads, inside = tiny_llama(0), [], [False]
    advance = llama_steps.LlamaSteps.advance

    def counted(self, *a, **kw):
        inside[0] = True
        try:
            with HostReads(reads):
                return advance(self, *a, **kw)
        finally:
            inside[0] = False

    def counting(name):
        real = getattr(torch.Tensor, name)

        def read(self, *a, **kw):
            if inside[0]:
                reads.append((name, sys._getframe(1).f_code.co_name))
            return real(self, *a, **kw)
        return read

    monkeypatch.setattr(llama_steps.LlamaSteps, "advance", counted)
    for name in READS:
        monkeypatch.setattr(torch.Tensor, name, counting(name))
    generate_batch(model, prompts(model.config.vocab_size), NEW, sampling, K, {5}, 0,
                   generator=torch.Generator().manual_seed(0))
    monkeypatch.undo()
    assert reads == []


def graph_path(monkeypatch, model):
    """The GPU's path on the CPU: pooled steps, the fused step body, each (width, sampling) captured once (the
    recording stand-in, tests/graph_standin.py) and replayed, host checks every CHECK_EVERY steps."""
    runner = GraphLlama(model, graphs=False)
    monkeypatch.setattr(llama_steps, "graphs_enabled", lambda device: True)
    monkeypatch.setattr(llama_steps, "runner_for", lambda m: runner)
    monkeypatch.setattr(llama_steps, "cuda_graph", RecordedGraph)
    monkeypatch.setattr(generation, "check_policy", lambda device: (generation.CHECK_EVERY, False))  # a GPU's
    RecordedGraph.made.clear()


def assert_same_rows(a, b):
    assert [g.response_ids for g in a] == [g.response_ids for g in b]
    assert [g.topk_ids for g in a] == [g.topk_ids for g in b]
    assert torch.allclose(torch.tensor([x for g in a for x in g.topk_logprobs]),
                          torch.tensor([x for g in b for x in g.topk_logprobs]), atol=2e-3)


def test_pooled_graph_steps_give_the_eager_result_batch_after_batch(tiny_llama, monkeypatch):
    model = tiny_llama(0, max_position_embeddings=1024)
    # one batch size: one pooled set of buffers; the last batch's steps cross a width (256 -> 512 columns)
    batches = [prompts(97, (5, 9, 3, 12), seed=1), prompts(97, (7, 2, 11, 4), seed=2),
               prompts(97, (250, 9, 244, 3), seed=3)]
    eager = [generate_batch(model, ps, NEW, GREEDY, K, {5, 17}, 0) for ps in batches]
    graph_path(monkeypatch, model)
    pooled = [generate_batch(model, ps, NEW, GREEDY, K, {5, 17}, 0) for ps in batches]
    pool = model.__dict__["_specdistill_batch_pool"]
    assert len(pool) == 1 and pool[0].capacity == 512  # the largest buffer kept, the first let go
    graphs = pool[0].graphs
    assert sorted(w for w, _ in graphs) == [256, 512] and all(isinstance(g, RecordedGraph) for g in graphs.values())
    assert sum(g.replays for g in RecordedGraph.made) >= 2 * (NEW - 2)  # replayed, not run again from Python
    for a, b in zip(eager, pooled):
        assert_same_rows(a, b)


def test_sampled_steps_are_captured_and_draw_what_the_eager_steps_draw(tiny_llama, monkeypatch):
    """The same seed, the same sampled tokens on the CPU's eager steps and on captured, replayed ones (the
    generator's stream advances in the replay as in the eager step)."""
    model, sampling = tiny_llama(0), SamplingParams(0.9, 20, 0.95)
    ps = prompts(model.config.vocab_size)
    eager = generate_batch(model, ps, NEW, sampling, K, set(), 0, generator=torch.Generator().manual_seed(3))
    graph_path(monkeypatch, model)
    got = generate_batch(model, ps, NEW, sampling, K, set(), 0, generator=torch.Generator().manual_seed(3))
    graphs = model.__dict__["_specdistill_batch_pool"][0].graphs
    assert list(graphs) == [(256, sampling)] and graphs[(256, sampling)].replays == NEW - 1
    assert_same_rows(eager, got)
    again = generate_batch(model, ps, NEW, sampling, K, set(), 0, generator=torch.Generator().manual_seed(4))
    assert [g.response_ids for g in again] != [g.response_ids for g in got]  # another seed, other draws


def test_a_step_that_reads_a_host_value_cannot_pass_as_captured(tiny_llama, monkeypatch):
    """The stand-in replays ops, not Python: a step whose mask width comes from the device through int() is
    refused at capture (a host read), counted, and its batch still right through the eager steps."""
    model = tiny_llama(0)
    ps = prompts(97)
    eager = generate_batch(model, ps, NEW, GREEDY, K, set(), 0)
    graph_path(monkeypatch, model)
    real = llama_steps.LlamaSteps.forward
    monkeypatch.setattr(llama_steps.LlamaSteps, "forward", lambda self, ids, width: real(self, ids, int(self.slot) + 1))
    got = generate_batch(model, ps, NEW, GREEDY, K, set(), 0)
    assert_same_rows(eager, got)
    assert len(llama_steps.eager_fallbacks(model)) == 1 and not RecordedGraph.made


def test_the_captured_step_runs_fewer_ops_than_the_decoder_s_layer_code(tiny_llama, monkeypatch):
    """aten ops of one decode step at a 4-layer tiny llama, the CPU's body (the decoder's layer code) against the
    captured body (step_ops); docs/data-engine.md has the counts."""
    model = tiny_llama(0, layers=4)
    ps = prompts(97, (5, 9, 3, 12))
    counts = {}
    for fused in (False, True):
        steps = llama_steps.LlamaSteps(model, len(ps), 64, NEW, K, set())
        steps.fused = fused
        steps.signed_sin = step_ops.signed_sin(steps.sin)
        with torch.inference_mode():
            steps.out.record(steps.prefill(*generation.left_pad(ps, 0, model.device)), GREEDY)
        counts[fused] = count_ops(functools.partial(steps.advance, GREEDY))  # (no inference mode: ops decomposed)
    (ops, kernels), (fused_ops, fused_kernels) = counts[False], counts[True]
    print(f"aten ops a step, 4 layers: {ops} ({kernels} not views) -> {fused_ops} ({fused_kernels})")
    assert fused_kernels < kernels - 4 * 8  # at least 8 kernels fewer a layer


def test_a_failed_capture_runs_the_steps_eagerly_and_is_counted(tiny_llama, monkeypatch, capsys):
    model = tiny_llama(0)
    ps = prompts(97)
    eager = generate_batch(model, ps, NEW, GREEDY, K, set(), 0)
    graph_path(monkeypatch, model)

    def fails(step, scratch, device, generator=None):
        scratch()
        step()  # a warm-up ran, then capture refused
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(llama_steps, "cuda_graph", fails)
    got = generate_batch(model, ps, NEW, GREEDY, K, set(), 0)
    assert_same_rows(eager, got)
    assert "could not be captured as a CUDA graph" in capsys.readouterr().err
    assert len(llama_steps.eager_fallbacks(model)) == 1  # what collect.json's eager_fallbacks counts


def test_check_policy():
    assert generation.check_policy(torch.device("cpu")) == (1, True)
    assert generation.check_policy(SimpleNamespace(type="cuda")) == (generation.CHECK_EVERY, False)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_steps_draw_what_eager_cuda_steps_draw_with_no_host_sync(tiny_llama, monkeypatch):
    """On a GPU: captured sampled steps (the generator registered with the graph) draw the eager steps' tokens for
    the same seed, with no capture falling back, under set_sync_debug_mode("error")."""
    model, sampling = tiny_llama(0).cuda(), SamplingParams(0.9, 20, 0.95)
    ps = prompts(model.config.vocab_size)
    monkeypatch.setenv("SPECDISTILL_SYNC_DEBUG", "error")
    graphs = generate_batch(model, ps, NEW, sampling, K, set(), 0, generator=torch.Generator("cuda").manual_seed(3))
    assert not llama_steps.eager_fallbacks(model)
    monkeypatch.setenv("SPECDISTILL_CUDA_GRAPHS", "0")
    eager = generate_batch(model, ps, NEW, sampling, K, set(), 0, generator=torch.Generator("cuda").manual_seed(3))
    assert [g.response_ids for g in graphs] == [g.response_ids for g in eager]
