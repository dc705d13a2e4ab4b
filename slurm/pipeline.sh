#!/bin/bash
# Submit the whole chain, collect (array) -> train -> eval (array), each stage `--dependency=afterok` on the
# one before and `--kill-on-invalid-dep=yes`, so a failed stage cancels everything after it. Prints the job
# ids; with --wait, waits for the chain and prints each job's state from `scontrol show job`.
#
#   export SPECDISTILL_OUTPUT=/shared/runs/exp1          # required: the output root (every node sees it)
#   slurm/pipeline.sh --shards 8 --nodes 2 --gpus-per-node 8 --train-time 12:00:00 \
#       --collect --config configs/collect/default.yaml \
#       --train --config configs/train/default.yaml \
#       --eval --limit 64 --gamma "[2, 4]"
#
# Options (before the first stage section; each also read from the variable named in brackets):
#   --output DIR            output root [SPECDISTILL_OUTPUT]; stages write DIR/collect, DIR/train, DIR/eval
#   --shards N              collect array size [SPECDISTILL_SHARDS, 4]
#   --nodes N               training nodes [SPECDISTILL_NODES, 1]
#   --gpus-per-node G       GPUs per training node; collect and eval tasks get one GPU each [SPECDISTILL_GPUS_PER_NODE]
#   --procs-per-node P      training processes per node without GPUs (CPU runs) [SPECDISTILL_PROCS_PER_NODE]
#   --eval-tasks K          eval array size, one checkpoint per task [SPECDISTILL_EVAL_TASKS, 3]
#   --partition P, --account A                   [SBATCH_PARTITION, SBATCH_ACCOUNT: sbatch reads them itself]
#   --collect-time T, --train-time T, --eval-time T   time limits [SPECDISTILL_COLLECT_TIME, ..._TRAIN_TIME, ..._EVAL_TIME]
#   --sbatch "ARGS"         extra sbatch options for every stage, e.g. "--qos=high --constraint=a100" [SPECDISTILL_SBATCH_ARGS]
#   --wait                  wait for the chain to finish; print states; exit 1 unless every job COMPLETED
# Stage sections: everything after --collect / --train / --eval (up to the next section) goes to that stage's
# script: distill.collect options, distill/train.py options, eval.slurm items and `-- distill.evaluate options`.
# The jobs also read SPECDISTILL_ENV, SPECDISTILL_MODULES, SPECDISTILL_ACCELERATE_CONFIG/_ARGS (slurm/README.md).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
START=$(date +%s)

OUTPUT=${SPECDISTILL_OUTPUT:-}
SHARDS=${SPECDISTILL_SHARDS:-4}
NODES=${SPECDISTILL_NODES:-1}
GPUS=${SPECDISTILL_GPUS_PER_NODE:-}
PROCS=${SPECDISTILL_PROCS_PER_NODE:-}
EVAL_TASKS=${SPECDISTILL_EVAL_TASKS:-3}
TIME_COLLECT=${SPECDISTILL_COLLECT_TIME:-}
TIME_TRAIN=${SPECDISTILL_TRAIN_TIME:-}
TIME_EVAL=${SPECDISTILL_EVAL_TIME:-}
EXTRA=${SPECDISTILL_SBATCH_ARGS:-}
WAIT=0
COMMON=()
COLLECT_ARGS=() TRAIN_ARGS=() EVAL_ARGS=()
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
need_value() { [[ $# -ge 2 ]] || { echo "error: $1 needs a value (see slurm/pipeline.sh --help)" >&2; exit 2; }; }
while (( $# )); do
    case "$1" in
        --collect | --train | --eval) break ;;
        --output) need_value "$@"; OUTPUT=$2; shift 2 ;;
        --shards) need_value "$@"; SHARDS=$2; shift 2 ;;
        --nodes) need_value "$@"; NODES=$2; shift 2 ;;
        --gpus-per-node) need_value "$@"; GPUS=$2; shift 2 ;;
        --procs-per-node) need_value "$@"; PROCS=$2; shift 2 ;;
        --eval-tasks) need_value "$@"; EVAL_TASKS=$2; shift 2 ;;
        --partition | --account) need_value "$@"; COMMON+=("$1=$2"); shift 2 ;;
        --collect-time) need_value "$@"; TIME_COLLECT=$2; shift 2 ;;
        --train-time) need_value "$@"; TIME_TRAIN=$2; shift 2 ;;
        --eval-time) need_value "$@"; TIME_EVAL=$2; shift 2 ;;
        --sbatch) need_value "$@"; EXTRA=$2; shift 2 ;;
        --wait) WAIT=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "error: unknown option $1 (stage options go after --collect / --train / --eval; see --help)" >&2; exit 2 ;;
    esac
done
section=""
while (( $# )); do
    case "$1" in
        --collect | --train | --eval) section=${1#--} ;;
        *) case "$section" in
               collect) COLLECT_ARGS+=("$1") ;;
               train) TRAIN_ARGS+=("$1") ;;
               eval) EVAL_ARGS+=("$1") ;;
           esac ;;
    esac
    shift
done

# --- check everything before submitting anything
[[ "$GPUS" != 0 ]] || GPUS=""
errors=()
[[ -n "$OUTPUT" ]] || errors+=("the output root is not set: export SPECDISTILL_OUTPUT=/shared/path/runs/NAME (or --output DIR)")
command -v sbatch >/dev/null || errors+=("sbatch is not on PATH: run this on a Slurm login node")
for v in SHARDS NODES EVAL_TASKS; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || errors+=("--$(tr '[:upper:]_' '[:lower:]-' <<<"$v") must be a positive integer, got '${!v}'")
done
if [[ -z "$GPUS" && -z "$PROCS" ]]; then
    errors+=("the training processes per node are not set: --gpus-per-node G (or SPECDISTILL_GPUS_PER_NODE=G) on a GPU
    cluster, or --procs-per-node P (or SPECDISTILL_PROCS_PER_NODE=P) for CPU processes")
fi
if (( ${#errors[@]} )); then
    for e in "${errors[@]}"; do echo "error: $e" >&2; done
    echo "(nothing was submitted; see slurm/pipeline.sh --help and slurm/README.md)" >&2
    exit 2
fi
# the stage options parse (config files exist, values are valid), when specdistill is importable here
if python -c "import distill" 2>/dev/null; then
    python - "${#COLLECT_ARGS[@]}" "${COLLECT_ARGS[@]}" "${#TRAIN_ARGS[@]}" "${TRAIN_ARGS[@]}" <<'EOF' || exit 2
import sys

from decode.errors import UserError
from decode import cli
from distill.collect import CollectConfig
from distill.train import TrainConfig

args = sys.argv[1:]
n = int(args[0])
collect_args, rest = args[1:1 + n], args[1 + n:]
train_args = rest[1:1 + int(rest[0])]
for name, cls, argv in (("--collect", CollectConfig, collect_args), ("--train", TrainConfig, train_args)):
    try:
        cli.parse(cls, argv)
    except (UserError, SystemExit) as e:
        sys.exit(f"error: {name} options: {e} (nothing was submitted)")
EOF
fi

export SPECDISTILL_OUTPUT=$OUTPUT SPECDISTILL_REPO=${SPECDISTILL_REPO:-$REPO}
[[ -z "$PROCS" ]] || export SPECDISTILL_PROCS_PER_NODE=$PROCS
read -r -a EXTRA_ARGS <<<"$EXTRA"
COMMON+=("${EXTRA_ARGS[@]}")
ONE_GPU=()
[[ -z "$GPUS" || "$GPUS" == 0 ]] || ONE_GPU=(--gpus=1)
mkdir -p logs

# --- submit; if a submission is refused, cancel what was already submitted
SUBMITTED=()
submit() {  # submit NAME SBATCH_ARGS... -> prints the job id
    local name=$1 out
    shift
    if ! out=$(sbatch --parsable "$@"); then
        echo "error: submitting the $name stage failed; cancelling ${SUBMITTED[*]:-nothing}" >&2
        (( ${#SUBMITTED[@]} == 0 )) || scancel "${SUBMITTED[@]}"
        exit 1
    fi
    SUBMITTED+=("${out%%;*}")
}
submit collect "${COMMON[@]}" "${ONE_GPU[@]}" --array="0-$((SHARDS - 1))" ${TIME_COLLECT:+--time="$TIME_COLLECT"} \
    "$REPO/slurm/collect.slurm" "${COLLECT_ARGS[@]}"
COLLECT=${SUBMITTED[-1]}
submit train "${COMMON[@]}" --nodes="$NODES" ${GPUS:+--gpus-per-node="$GPUS"} ${TIME_TRAIN:+--time="$TIME_TRAIN"} \
    ${PROCS:+--cpus-per-task="$PROCS"} --dependency="afterok:$COLLECT" --kill-on-invalid-dep=yes \
    "$REPO/slurm/train.slurm" "${TRAIN_ARGS[@]}"
TRAIN=${SUBMITTED[-1]}
submit eval "${COMMON[@]}" "${ONE_GPU[@]}" --array="0-$((EVAL_TASKS - 1))" ${TIME_EVAL:+--time="$TIME_EVAL"} \
    --dependency="afterok:$TRAIN" --kill-on-invalid-dep=yes "$REPO/slurm/eval.slurm" "${EVAL_ARGS[@]}"
EVAL=${SUBMITTED[-1]}

echo "output root: $OUTPUT"
printf '%-8s %-8s %s\n' stage job "runs after"
printf '%-8s %-8s %s\n' collect "$COLLECT" "- (array 0-$((SHARDS - 1)))" train "$TRAIN" "afterok:$COLLECT ($NODES node(s))" \
    eval "$EVAL" "afterok:$TRAIN (array 0-$((EVAL_TASKS - 1)))"
echo "logs: logs/sd-{collect,train,eval}-<job id>.out; watch: squeue -j $COLLECT,$TRAIN,$EVAL"
(( WAIT )) || exit 0

# --- --wait: until no job of the chain is pending or running, then the states scontrol reports
while squeue -h -j "$COLLECT,$TRAIN,$EVAL" -o %i 2>/dev/null | grep -q .; do sleep 5; done
ok=1
for j in "$COLLECT" "$TRAIN" "$EVAL"; do
    while read -r line; do
        id=$(grep -o ' JobId=[^ ]*\|^JobId=[^ ]*' <<<"$line" | head -n1 | tr -d ' ')
        state=$(grep -o 'JobState=[^ ]*' <<<"$line")
        reason=$(grep -o 'Reason=[^ ]*' <<<"$line")
        exitc=$(grep -o ' ExitCode=[^ ]*' <<<"$line" | tr -d ' ')
        array=$(grep -o 'ArrayTaskId=[^ ]*' <<<"$line" || true)
        echo "scontrol show job $j: $id ${array:+$array }$state $reason $exitc"
        [[ "$state" == JobState=COMPLETED ]] || ok=0
    done < <(scontrol show job -o "$j")
done
t=$(( $(date +%s) - START ))
echo "chain finished in ${t} s: $([[ $ok == 1 ]] && echo 'every job COMPLETED' || echo 'not every job COMPLETED')"
[[ -f "$OUTPUT/eval/report.json" ]] && echo "report: $OUTPUT/eval/report.md"
(( ok ))
