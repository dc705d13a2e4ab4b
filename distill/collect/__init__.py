"""collect: run the target on prompts and store its outputs with top-k logprobs, resumably, in shards.

    job.py          CollectConfig, run(), main(): `python -m distill.collect`
    generation.py   batched generation and teacher-forced scoring that keep the target's top-k logprobs
    llama_steps.py  a llama-family target's decode steps in static shapes (each a CUDA graph replay on a GPU)
    outputs.py      a generating batch's tokens, top-k and ends, kept on the device until the batch ends
    shards.py       the collected dataset on disk (atomic shards, exactly-once resume, collect.json)
    self_prompts.py --prompts self:N: the target writes its own prompts (Magpie), deduplicated and category-balanced
    near_duplicates.py  MinHash + LSH near-duplicate lookup (self-written prompts against accepted and held-out ones)
    categories.py   a prompt's category by k-NN over the target's hidden states, and per-category quotas
    vllm_engine.py  vLLM plumbing shared with evaluation: installed?, an LLM with our settings, top-k rows, counters
    bench.py        `python -m distill.collect.bench`: collection throughput against HF generate (or vLLM against HF)
"""

from distill.collect.job import CollectConfig, finish, main, prepare, run

__all__ = ["CollectConfig", "finish", "main", "prepare", "run"]
