#!/usr/bin/env bash
# The planner's price of the gradient shard's offload against measured
# steps: calibrates this machine with the offload directory (train_gpt
# --calibrate --offload-dir), asks plan_gpt --explain for the one-rank
# ZeRO-2 layout with the moments on disk, without and with the gradient
# shard beside them (--offload optimizer and optimizer,grads), trains both
# (--offload optimizer=disk:DIR and optimizer=disk:DIR,grads=disk:DIR)
# and prints predicted against measured: the steps, and what the
# gradients' offload adds to a step (its I/O is synchronous: the planner
# puts all of it in the step). docs/plan.md "Offload I/O" has results.
#
# usage: bench/plan/offload_grads_check.sh [BUILD_DIR] [DIR] [STEPS] [MICROS]
#   DIR: the offload directory (a new one under $TMPDIR by default);
#   STEPS: training steps of each run (8; the first is left out);
#   MICROS: micro-batches a step (--grad-accum, 2).
set -euo pipefail
build=${1:-build}
dir=${2:-}
steps=${3:-8}
micros=${4:-2}
((micros >= 1)) || { echo "MICROS $micros: at least 1" >&2; exit 2; }
source "$(dirname "$0")/offload_common.sh"
# predicted: the step, and the offload's I/O that it pays
explain() {
    "$plan" "${model[@]}" --world 1 --global-batch $((mb * micros)) --cluster "$tmp/cluster" \
        --offload "$1" --fix dp=1,tp=1,pp=1,sp=0,zero=2,recompute=none,micro_batch=$mb \
        --explain 1 >"$tmp/explain" 2>&1 || { cat "$tmp/explain" >&2; exit 1; }
    p_step=$(sed -n 's/^  time of a step: \([0-9.e+]*\) ms.*/\1/p' "$tmp/explain")
    p_paid=$(sed -n 's/^    offload I\/O  *\([0-9.e+]*\) ms .*/\1/p' "$tmp/explain")
    [[ -n "$p_step" && -n "$p_paid" ]] || { cat "$tmp/explain" >&2; exit 1; }
}
explain optimizer
p_step0=$p_step p_paid0=$p_paid
explain optimizer,grads
p_step1=$p_step p_paid1=$p_paid
# measured: ms a step after the first
run() {
    "$train" "${model[@]}" --micro-batch $mb --grad-accum "$micros" --zero 2 --steps "$steps" \
        --report "$@" >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
    step=$(sed -n 's/.*after the first: \([0-9.]*\) ms\/step.*/\1/p' "$tmp/err")
}
run --offload "optimizer=disk:$dir"
m_step0=$step
run --offload "optimizer=disk:$dir,grads=disk:$dir"
m_step1=$step
rates=$(sed -n 's/.*the offload directory \(.*\); wrote.*/\1/p' "$tmp/calib")
echo "# model ${model[*]} micro-batch $mb x $micros, 1 rank, ZeRO 2; $steps steps a run"
echo "# disk ($dir): $rates; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| %-40s | %12s | %12s |\n' "" predicted measured
printf '|%s|%s|%s|\n' "------------------------------------------" "-------------:" "-------------:"
printf '| %-40s | %12.1f | %12.1f |\n' "step, moments on disk (ms)" "$p_step0" "$m_step0"
printf '| %-40s | %12.1f | %12.1f |\n' "step, moments and gradients on disk (ms)" "$p_step1" "$m_step1"
printf '| %-40s | %12.1f | %12.1f |\n' "the gradients' offload adds (ms)" \
    "$(awk -v a="$p_paid1" -v b="$p_paid0" 'BEGIN { print a - b }')" \
    "$(awk -v a="$m_step1" -v b="$m_step0" 'BEGIN { print a - b }')"
