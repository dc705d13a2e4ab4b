#!/usr/bin/env bash
# The test suite: install, lint, then every test (slow real-model and multi-process tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python -m ruff check .
python -m pytest -q "$@"
