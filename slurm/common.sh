# Shared by the slurm/*.slurm scripts (sourced, never run): checks, environment set-up, settings and timing.
# Everything cluster-specific comes from these variables (or sbatch's own flags / SBATCH_* variables):
#
#   SPECDISTILL_OUTPUT    required: output root on a filesystem every node sees (stages write OUTPUT/<stage>)
#   SPECDISTILL_ENV       shell command that activates the Python environment, e.g. "source ~/venvs/sd/bin/activate"
#                         or "conda activate sd" (empty: the python on PATH at submission)
#   SPECDISTILL_MODULES   modules to `module load` first, e.g. "cuda/12.4 gcc/12" (empty: none)
#   SPECDISTILL_REPO      the specdistill checkout (default: found from the submitted script's path)
#   partition, account, time limit, GPUs: sbatch flags or SBATCH_PARTITION, SBATCH_ACCOUNT, SBATCH_TIMELIMIT,
#                         SBATCH_GPUS_PER_NODE (sbatch reads these itself)

SD_START=$(date +%s)
SD_ERRORS=()

sd_elapsed() {  # [status]: the script's exit status by default
    local rc=${1:-$?} t=$(( $(date +%s) - SD_START ))
    if [[ -n "${SLURM_JOB_ID:-}" ]]; then
        printf '== %s: elapsed %dm%02ds (%d s), exit status %d\n' "${SD_STAGE:-job}" $((t / 60)) $((t % 60)) "$t" "$rc"
    fi
}
trap sd_elapsed EXIT

# sd_need VAR "how to set it": record an error when VAR is empty
sd_need() {
    [[ -n "${!1:-}" ]] || SD_ERRORS+=("$1 is not set: $2")
}

# sd_check "sbatch command that submits this script": report every problem at once, then exit 2 without running
# anything; run outside a Slurm job, say so and show how to submit it
sd_check() {
    if [[ -z "${SLURM_JOB_ID:-}" ]]; then
        SD_ERRORS+=("not inside a Slurm job (SLURM_JOB_ID is unset): this is a batch script; submit it from the checkout with
    mkdir -p logs && $1")
    fi
    if (( ${#SD_ERRORS[@]} )); then
        local e
        for e in "${SD_ERRORS[@]}"; do echo "error: $e" >&2; done
        echo "(nothing was run or submitted; see slurm/README.md)" >&2
        trap - EXIT
        exit 2
    fi
}

# modules, then the Python environment; fail early when specdistill is not importable
sd_setup_env() {
    if [[ -n "${SPECDISTILL_MODULES:-}" ]]; then
        command -v module >/dev/null 2>&1 || { echo "error: SPECDISTILL_MODULES is set but there is no \`module\` command" >&2; exit 2; }
        set +u  # module and activation scripts often read unset variables
        # shellcheck disable=SC2086
        module load $SPECDISTILL_MODULES
        set -u
    fi
    if [[ -n "${SPECDISTILL_ENV:-}" ]]; then
        set +u
        eval "$SPECDISTILL_ENV"
        set -u
    fi
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}
    export TOKENIZERS_PARALLELISM=${TOKENIZERS_PARALLELISM:-false}
    export PYTHONUNBUFFERED=1
    python -c "import distill" 2>/dev/null || {
        echo "error: \`python -c 'import distill'\` fails with $(command -v python || echo 'no python'): set SPECDISTILL_ENV" \
             "to the command that activates the environment where specdistill is installed (pip install -e .)" >&2
        exit 2
    }
}

# sd_arg FLAG ARGS...: the last value given for --flag (as "--flag V" or "--flag=V"), empty if none
sd_arg() {
    local flag=$1 value="" prev=""
    shift
    for a in "$@"; do
        if [[ "$prev" == "$flag" ]]; then value=$a; fi
        if [[ "$a" == "$flag="* ]]; then value=${a#*=}; fi
        prev=$a
    done
    printf '%s' "$value"
}

# sd_settings NAME=VALUE ...: the resolved settings, printed at the start of every job
sd_settings() {
    echo "== ${SD_STAGE}: $(date -Is) on $(hostname), job ${SLURM_JOB_ID}${SLURM_ARRAY_TASK_ID:+ (array ${SLURM_ARRAY_JOB_ID}, task ${SLURM_ARRAY_TASK_ID} of ${SLURM_ARRAY_TASK_COUNT})}${SLURM_RESTART_COUNT:+, restart ${SLURM_RESTART_COUNT}}"
    local kv
    for kv in "$@"; do printf '   %-22s %s\n' "${kv%%=*}" "${kv#*=}"; done
    printf '   %-22s %s\n' repo "$SPECDISTILL_REPO" python "$(command -v python)" \
        modules "${SPECDISTILL_MODULES:-(none)}" env "${SPECDISTILL_ENV:-(none: PATH at submission)}" \
        partition "${SLURM_JOB_PARTITION:-?}" account "${SLURM_JOB_ACCOUNT:-(default)}" \
        nodelist "${SLURM_JOB_NODELIST:-?}" OMP_NUM_THREADS "$OMP_NUM_THREADS"
}
