#!/usr/bin/env bash
# The test suite: install, lint, then every test (slow real-model and multi-process tests included): first in the
# main environment, then the tests that need vLLM under .venv-vllm (scripts/setup.sh makes it).
# Both passes run on two pytest-xdist workers (tests/conftest.py says how files are dealt out), print their 30
# slowest tests and their wall time, so the budget (CI: 35 minutes for this whole script on 2 cores) stays visible.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python -m ruff check .
# build once what both passes and every worker would otherwise race to build: the default target's safetensors
# conversion and the CPU verification kernel of every instruction set this CPU runs (the tests use each)
python -c 'from decode.models.targets import resolve; resolve("default")' &
for isa in $(python -c 'from decode.runners import smallgemm; print(*smallgemm.runnable_isas())'); do
    python -c "from decode.runners import smallgemm; assert smallgemm.kernel('$isa') is not None, '$isa did not build'" &
done
wait
PARALLEL=(-n "${SPECDISTILL_TEST_WORKERS:-2}" --dist loadgroup --no-loadscope-reorder --durations=30)
start=$SECONDS
python -m pytest -q -m "not vllm" "${PARALLEL[@]}" "$@"
echo "main pass: $(( SECONDS - start )) s"
VLLM_PY="$PWD/.venv-vllm/bin/python"  # absolute: tests hand it to subprocesses that run elsewhere
start=$SECONDS
SPECDISTILL_VLLM_PYTHON="$VLLM_PY" VLLM_CPU_KVCACHE_SPACE=1 "$VLLM_PY" -m pytest -q -m vllm "${PARALLEL[@]}" "$@"
echo "vllm pass: $(( SECONDS - start )) s"
