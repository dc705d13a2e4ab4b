"""python -m decode.bench (decode/bench/job.py)."""

from decode.bench.job import main

main()
