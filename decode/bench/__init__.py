"""bench: measuring drafts in the decoder (`python -m decode.bench`, job.py).

    job.py        the command: one target/draft pair, its result JSON and one-line summary
    config.py     BenchConfig: the decoding knobs and the run's; what a draft allows (is_head, hf_skip_reason)
    measure.py    measure_many: drafts against one target-alone baseline, interleaved, with the lossless rule
    results.py    the result dict from a run's stats (speed, α, τ, per category, cost model) and its summary
    latency.py    c and v(γ) measured on the device in use; costmodel.py the cost model (docs/architecture.md)
    anchors.py    transformers' own generate and assisted generation, timed as anchors
"""

from decode.bench import costmodel, latency
from decode.bench.config import BenchConfig, draft_kind, is_head
from decode.bench.job import main, parse_args, run
from decode.bench.measure import encode_all, measure_many, measure_pair
from decode.bench.results import summary

__all__ = ["BenchConfig", "costmodel", "draft_kind", "encode_all", "is_head", "latency", "main", "measure_many",
           "measure_pair", "parse_args", "run", "summary"]
