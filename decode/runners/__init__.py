"""runners: how the decoder runs a model on a device: one forward over new tokens after a KV cache, returning the
last positions' logits (choice.runner_for picks the runner).

    runner.new_cache(max_len) -> cache          cache.crop(-n) drops the last n positions
    runner.forward(ids, cache, keep) -> (keep, V) logits
    runner.forward(ids, cache, keep, tree=(positions, mask))
                                                a token tree's forward (decode.drafting.tree): id i at rotary
                                                position positions[i] (n,), attending where mask[i] (n, start + n)
    cache.keep(start, rows)                     keep positions start + rows[i] at start + i, forget the rest
    runner.capture = (a, b, c)                  every later forward also leaves runner.features (n, 3H): the hidden
                                                states entering layers a, b, c (HF's output_hidden_states[j]),
                                                which a feature head drafts from

    hf.py         HFRunner: any HF causal LM (DynamicCache), also spread over several GPUs
    fast.py       FastLlama: a lean llama-family forward on one device, a preallocated cache
    graphs.py     GraphLlama: FastLlama in static shapes, each GPU step a CUDA graph replay
    head.py       HeadRunner: a feature head's step, timed as a draft's
    smallgemm.py  the CPU kernels (few-row GEMM, few-row attention) built from csrc/
    choice.py     runner_for: the fastest runner that computes a model exactly
"""
