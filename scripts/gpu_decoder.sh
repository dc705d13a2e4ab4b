#!/usr/bin/env bash
# Issue 37's GPU numbers in one command: bash scripts/gpu_decoder.sh OUT [8b|tiny]
# Writes OUT/target (a config-only Llama-3.1-8B-shaped folder, random weights built on the GPU per phase), then
# runs scripts/gpu_decoder.py's three phases, each under its own timeout, logs and JSON in OUT.
set -uo pipefail
out=${1:?usage: gpu_decoder.sh OUT [8b|tiny]}; shape=${2:-8b}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # scripts/ is not the repository root
python -c "from pathlib import Path; from distill.gpu_check import write_target, tokenizer_dir; write_target(Path('$out/target'), '$shape', tokenizer_dir())"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > "$out/gpu.txt" 2>&1 || echo "no GPU" > "$out/gpu.txt"
for phase_limit in graphs:${T_GRAPHS:-230} eager:${T_EAGER:-150} static:${T_STATIC:-170}; do
    phase=${phase_limit%%:*}; limit=${phase_limit##*:}
    start=$SECONDS
    # the eager path is the slow one (~47 ms a target forward on an H200): fewer prompts
    prompts=${SPECDISTILL_GPU_PROMPTS:-6}
    [ "$phase" = eager ] && prompts=${EAGER_PROMPTS:-3}
    SPECDISTILL_GPU_PROMPTS=$prompts timeout "$limit" python scripts/gpu_decoder.py "$out/target" "$out/$phase.json" \
        "$phase" > "$out/$phase.log" 2>&1
    echo "$phase: exit $? after $(( SECONDS - start )) s (limit $limit)"
    grep -E "^$phase|Error|error" "$out/$phase.log" | tail -8
done
