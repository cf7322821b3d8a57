#!/usr/bin/env bash
# The planner's price of a MoE model's experts' files against measured
# steps: calibrates this machine with the offload directory (train_gpt
# --calibrate --offload-dir), asks plan_gpt --explain for the one-rank
# ZeRO-2 layout of a MoE model (8 experts in every second block) with the
# moments and the parameters on disk, without and with the gradients
# beside them (--offload optimizer,params and optimizer,params,grads:
# the experts' parameters in a file of their own, and with grads their
# gradients in another), trains both and prints predicted against
# measured: the steps, and what the gradients' files add to a step. The
# experts' gradients are read and written around every backward and read
# again by the norm and the update, so MICROS moves their share.
# docs/plan.md "Offload I/O" has results.
#
# usage: bench/plan/offload_experts_check.sh [BUILD_DIR] [DIR] [STEPS] [MICROS]
#   DIR: the offload directory (a new one under $TMPDIR by default);
#   STEPS: training steps of each run (8; the first is left out);
#   MICROS: micro-batches a step (--grad-accum, 4).
set -euo pipefail
build=${1:-build}
dir=${2:-}
steps=${3:-8}
micros=${4:-4}
((micros >= 1)) || { echo "MICROS $micros: at least 1" >&2; exit 2; }
source "$(dirname "$0")/offload_common.sh"
moe=(--experts 8 --top-k 2 --moe-every 2)
# predicted: the step, the offload's I/O that it pays, and all of it
explain() {
    "$plan" "${model[@]}" "${moe[@]}" --world 1 --global-batch $((mb * micros)) \
        --cluster "$tmp/cluster" --offload "$1" \
        --fix dp=1,tp=1,pp=1,sp=0,zero=2,recompute=none,micro_batch=$mb \
        --explain 1 >"$tmp/explain" 2>&1 || { cat "$tmp/explain" >&2; exit 1; }
    p_step=$(sed -n 's/^  time of a step: \([0-9.e+]*\) ms.*/\1/p' "$tmp/explain")
    p_paid=$(sed -n 's/^    offload I\/O  *\([0-9.e+]*\) ms .*/\1/p' "$tmp/explain")
    p_io=$(sed -n 's/^    offload I\/O  *[0-9.e+]* ms .* of \([0-9.e+]*\) ms at .*/\1/p' "$tmp/explain")
    [[ -n "$p_step" && -n "$p_paid" && -n "$p_io" ]] || { cat "$tmp/explain" >&2; exit 1; }
}
explain optimizer,params
p_step0=$p_step p_paid0=$p_paid p_io0=$p_io
explain optimizer,params,grads
p_step1=$p_step p_paid1=$p_paid p_io1=$p_io
# measured: ms a step after the first, and the experts' reads not ahead
run() {
    "$train" "${model[@]}" "${moe[@]}" --micro-batch $mb --grad-accum "$micros" --zero 2 \
        --steps "$steps" --report "$@" >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
    step=$(sed -n 's/.*after the first: \([0-9.]*\) ms\/step.*/\1/p' "$tmp/err")
    [[ -n "$step" ]] || { cat "$tmp/err" >&2; exit 1; }
    grep -q "experts' parameter offload" "$tmp/err" || {
        echo "no experts' parameter offload on the report:" >&2
        cat "$tmp/err" >&2
        exit 1
    }
}
run --offload "optimizer=disk:$dir,params=disk:$dir"
m_step0=$step
run --offload "optimizer=disk:$dir,params=disk:$dir,grads=disk:$dir"
m_step1=$step
grep -q "experts' gradient offload" "$tmp/err" || {
    echo "no experts' gradient offload on the report:" >&2
    cat "$tmp/err" >&2
    exit 1
}
rates=$(sed -n 's/.*the offload directory \(.*\); wrote.*/\1/p' "$tmp/calib")
echo "# model ${model[*]} ${moe[*]}, micro-batch $mb x $micros, 1 rank, ZeRO 2; $steps steps a run"
echo "# disk ($dir): $rates; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| %-46s | %12s | %12s |\n' "" predicted measured
printf '|%s|%s|%s|\n' "------------------------------------------------" "-------------:" "-------------:"
printf '| %-46s | %12.1f | %12.1f |\n' "step, optimizer and parameters on disk (ms)" "$p_step0" "$m_step0"
printf '| %-46s | %12.1f | %12.1f |\n' "step, the gradients on disk too (ms)" "$p_step1" "$m_step1"
printf '| %-46s | %12.1f | %12.1f |\n' "the gradients' files add (ms)" \
    "$(awk -v a="$p_step1" -v b="$p_step0" 'BEGIN { print a - b }')" \
    "$(awk -v a="$m_step1" -v b="$m_step0" 'BEGIN { print a - b }')"
printf '| %-46s | %12.1f | %12s |\n' "offload I/O paid, without and with (ms)" "$p_paid0" "-"
printf '| %-46s | %12.1f | %12s |\n' "" "$p_paid1" "-"
printf '| %-46s | %12.1f | %12s |\n' "offload I/O in all, without and with (ms)" "$p_io0" "-"
printf '| %-46s | %12.1f | %12s |\n' "" "$p_io1" "-"
