"""decode.bench.latency: the target's one-token step against streaming its weights once (cost_model.weight_stream_ms)."""

from decode.bench import latency


def test_the_target_step_is_set_against_reading_its_weights_once(tiny_llama):
    model = tiny_llama(0)
    params = sum(p.numel() for p in model.parameters())  # tied head counted once by .parameters()
    embedding = model.get_input_embeddings().weight.numel()
    tied = model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert latency.weight_bytes(model) == 4 * (params - (0 if tied else embedding))
    m = latency.measure(model, None, [1], context=8, repeats=2)
    assert m["weight_MB"] == round(latency.weight_bytes(model) / 1e6, 1) and m["weight_stream_ms"] > 0
    assert m["target_step_vs_stream"] > 0 and m["stream_GBps"] > 0  # a tiny model's stream is ~1 µs: no ratio check
    assert set(m["target_matmul"]) == {"one_token", "prompt", "verify", "kernel_isa", "kernel_prefetch_bytes"}
