#!/usr/bin/env bash
# The test suite: install, lint, then every test (slow real-model and multi-process tests included): first in the
# main environment, then the tests that need vLLM under .venv-vllm (scripts/setup.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python -m ruff check .
python -m pytest -q -m "not vllm" "$@"
VLLM_PY="$PWD/.venv-vllm/bin/python"  # absolute: tests hand it to subprocesses that run elsewhere
SPECDISTILL_VLLM_PYTHON="$VLLM_PY" VLLM_CPU_KVCACHE_SPACE=1 "$VLLM_PY" -m pytest -q -m vllm "$@"
