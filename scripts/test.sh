#!/usr/bin/env bash
# The test suite: install, lint, then every test (slow real-model and multi-process tests included): first in the
# main environment, then the tests that need vLLM under .venv-vllm (scripts/setup.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python -m ruff check .
python -m pytest -q -m "not vllm" "$@"
SPECDISTILL_VLLM_PYTHON=.venv-vllm/bin/python VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python -m pytest -q -m vllm "$@"
