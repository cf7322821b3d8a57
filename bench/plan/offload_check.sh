#!/usr/bin/env bash
# The planner's price of the optimizer offload against measured steps:
# calibrates this machine with the offload directory (train_gpt
# --calibrate --offload-dir: kernels and the directory's read and write
# rates), asks plan_gpt --offload optimizer --explain for the one-rank
# layout, then trains it with the moments in memory and on disk (--offload
# optimizer=disk:DIR, the files kept to count their bytes) and prints
# predicted against measured side by side: step time, the offload's I/O
# time and what the step pays for it, and the bytes read and written a
# step. docs/plan.md "Offload I/O" has results.
#
# usage: bench/plan/offload_check.sh [BUILD_DIR] [DIR] [STEPS] [CHUNK]
#   DIR: the offload directory (a new one under $TMPDIR by default);
#   STEPS: training steps of each run (8; the first is left out);
#   CHUNK: --offload-chunk in bytes (4194304).
set -euo pipefail
build=${1:-build}
dir=${2:-}
steps=${3:-8}
chunk=${4:-4194304}
source "$(dirname "$0")/offload_common.sh"
"$plan" "${model[@]}" --world 1 --global-batch $mb --cluster "$tmp/cluster" --offload optimizer \
    --offload-chunk "$chunk" --fix dp=1,tp=1,pp=1,sp=0,zero=0,recompute=none,micro_batch=$mb \
    --explain 1 >"$tmp/explain" 2>&1 || { cat "$tmp/explain" >&2; exit 1; }
# predicted: the step, the offload's I/O in all and what the step pays
p_step=$(sed -n 's/^  time of a step: \([0-9.e+]*\) ms.*/\1/p' "$tmp/explain")
p_paid=$(sed -n 's/^    offload I\/O  *\([0-9.e+]*\) ms .* of \([0-9.e+]*\) ms at .*/\1/p' "$tmp/explain")
p_io=$(sed -n 's/^    offload I\/O  *[0-9.e+]* ms .* of \([0-9.e+]*\) ms at .*/\1/p' "$tmp/explain")
p_opt=$(sed -n 's/^    optimizer  *\([0-9.e+]*\) ms.*/\1/p' "$tmp/explain")
[[ -n "$p_step" && -n "$p_paid" && -n "$p_io" ]] || { cat "$tmp/explain" >&2; exit 1; }

# measured: ms a step after the first, and the update's ms (--report),
# where the optimizer offload's I/O is paid: what the step pays for the
# offload is the update on disk less the update in memory (the whole
# steps' difference is within their noise on a loaded machine)
run() {
    "$train" "${model[@]}" --micro-batch $mb --steps "$steps" --report "$@" >/dev/null \
        2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
    step=$(sed -n 's/.*after the first: \([0-9.]*\) ms\/step.*/\1/p' "$tmp/err")
    upd=$(sed -n 's/.* update \([0-9.]*\) gather-wait.*/\1/p' "$tmp/err")
}
run
m_mem=$step u_mem=$upd
mkdir "$tmp/keep"
run --offload "optimizer=disk:$tmp/keep" --offload-chunk "$chunk" --offload-keep
m_disk=$step u_disk=$upd
# the moments' file is read and written whole each step
m_bytes=$(find "$tmp/keep" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
rates=$(sed -n 's/.*the offload directory \(.*\); wrote.*/\1/p' "$tmp/calib")
echo "# model ${model[*]} micro-batch $mb, 1 rank, chunk $chunk; $steps steps a run"
echo "# disk ($dir): $rates; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| %-35s | %12s | %12s |\n' "" predicted measured
printf '|%s|%s|%s|\n' "-------------------------------------" "-------------:" "-------------:"
printf '| %-35s | %12s | %12.1f |\n' "step, moments in memory (ms)" "-" "$m_mem"
printf '| %-35s | %12.1f | %12.1f |\n' "step, moments on disk (ms)" "$p_step" "$m_disk"
printf '| %-35s | %12.1f | %12.1f |\n' "AdamW, moments in memory (ms)" "$p_opt" "$u_mem"
printf '| %-35s | %12.1f | %12.1f |\n' "the step pays for the offload (ms)" "$p_paid" \
    "$(awk -v a="$u_disk" -v b="$u_mem" 'BEGIN { print a - b }')"
printf '| %-35s | %12.1f | %12s |\n' "offload I/O in all (ms)" "$p_io" "-"
printf '| %-35s | %12.1f | %12.1f |\n' "update with its I/O (ms)" \
    "$(awk -v a="$p_opt" -v b="$p_paid" 'BEGIN { print a + b }')" "$u_disk"
# the planner's bytes: its I/O time at the calibrated rates, read = written
R=$(sed -n 's/^disk_read_gbs = \([0-9.e+]*\).*/\1/p' "$tmp/cluster")
W=$(sed -n 's/^disk_write_gbs = \([0-9.e+]*\).*/\1/p' "$tmp/cluster")
p_bytes=$(awk -v t="$p_io" -v r="$R" -v w="$W" 'BEGIN { printf "%.0f", t / (1 / (r * 1e6) + 1 / (w * 1e6)) }')
printf '| %-35s | %12d | %12d |\n' "bytes read and written a step, each" "$p_bytes" "$m_bytes"
