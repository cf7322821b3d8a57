#!/usr/bin/env bash
# The planner's price of the parameters' offload against measured steps:
# calibrates this machine with the offload directory (train_gpt
# --calibrate --offload-dir), asks plan_gpt --offload params --explain for
# the one-rank layout, then trains it with the blocks' parameters in
# memory and on disk (--offload params=disk:DIR, the file kept to count
# its bytes) and prints predicted against measured side by side: the
# step, what the step pays for the offload, its I/O in all, and the bytes
# it moves a step. docs/plan.md "Offload I/O" has results.
#
# usage: bench/plan/offload_params_check.sh [BUILD_DIR] [DIR] [STEPS] [ACCUM]
#   DIR: the offload directory (a new one under $TMPDIR by default);
#   STEPS: training steps of each run (8; the first is left out);
#   ACCUM: micro-batches a step (2): each reads every block twice.
set -euo pipefail
build=${1:-build}
dir=${2:-}
steps=${3:-8}
accum=${4:-2}
((accum >= 1)) || { echo "ACCUM $accum: at least 1" >&2; exit 2; }
source "$(dirname "$0")/offload_common.sh"
gb=$((mb * accum))
"$plan" "${model[@]}" --world 1 --global-batch $gb --cluster "$tmp/cluster" --offload params \
    --fix dp=1,tp=1,pp=1,sp=0,zero=0,recompute=none,micro_batch=$mb \
    --explain 1 >"$tmp/explain" 2>&1 || { cat "$tmp/explain" >&2; exit 1; }
p_step=$(sed -n 's/^  time of a step: \([0-9.e+]*\) ms.*/\1/p' "$tmp/explain")
p_paid=$(sed -n 's/^    offload I\/O  *\([0-9.e+]*\) ms .* of \([0-9.e+]*\) ms at .*/\1/p' "$tmp/explain")
p_io=$(sed -n 's/^    offload I\/O  *[0-9.e+]* ms .* of \([0-9.e+]*\) ms at .*/\1/p' "$tmp/explain")
[[ -n "$p_step" && -n "$p_paid" && -n "$p_io" ]] || { cat "$tmp/explain" >&2; exit 1; }

# measured: ms a step after the first; the offload's cost is the whole
# steps' difference (its reads are spread over every pass)
run() {
    "$train" "${model[@]}" --micro-batch $mb --global-batch $gb --grad-accum "$accum" \
        --steps "$steps" --report "$@" >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
    step=$(sed -n 's/.*after the first: \([0-9.]*\) ms\/step.*/\1/p' "$tmp/err")
}
run
m_mem=$step
mkdir "$tmp/keep"
run --offload "params=disk:$tmp/keep" --offload-keep
m_disk=$step
miss=$(sed -n 's/.* \([0-9]*\) not read ahead.*/\1/p' "$tmp/err")
# every block read once per micro-batch's forward and backward and once
# in the update, and written once: the file's bytes (2 x ACCUM + 2) times
f_bytes=$(find "$tmp/keep" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
m_bytes=$((f_bytes * (2 * accum + 2)))
R=$(sed -n 's/^disk_read_gbs = \([0-9.e+]*\).*/\1/p' "$tmp/cluster")
W=$(sed -n 's/^disk_write_gbs = \([0-9.e+]*\).*/\1/p' "$tmp/cluster")
# the planner's bytes from its I/O time: (2 ACCUM + 1) reads to a write
p_bytes=$(awk -v t="$p_io" -v r="$R" -v w="$W" -v a="$accum" 'BEGIN {
    k = 2 * a + 1; printf "%.0f", t / (k / (r * 1e6) + 1 / (w * 1e6)) * (k + 1) }')
rates=$(sed -n 's/.*the offload directory \(.*\); wrote.*/\1/p' "$tmp/calib")
echo "# model ${model[*]} micro-batch $mb x $accum, 1 rank; $steps steps a run; $miss reads not ahead"
echo "# disk ($dir): $rates; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| %-38s | %12s | %12s |\n' "" predicted measured
printf '|%s|%s|%s|\n' "----------------------------------------" "-------------:" "-------------:"
printf '| %-38s | %12s | %12.1f |\n' "step, parameters in memory (ms)" "-" "$m_mem"
printf '| %-38s | %12.1f | %12.1f |\n' "step, parameters on disk (ms)" "$p_step" "$m_disk"
printf '| %-38s | %12.1f | %12.1f |\n' "the step pays for the offload (ms)" "$p_paid" \
    "$(awk -v a="$m_disk" -v b="$m_mem" 'BEGIN { print a - b }')"
printf '| %-38s | %12.1f | %12s |\n' "offload I/O in all (ms)" "$p_io" "-"
printf '| %-38s | %12d | %12d |\n' "bytes read and written a step, in all" "$p_bytes" "$m_bytes"
