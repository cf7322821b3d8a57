#!/usr/bin/env bash
# train_gpt under a real memory limit (issue 45 point 4, for the optimizer
# offload of point 1): a memory cgroup of this shell's own (cgroup v2's
# memory.max, else v1's memory.limit_in_bytes; needs root) whose limit is
# what a rank needs with its moments on disk and a tenth (its peak RSS in an
# unlimited run), below what it needs without: the run without offload is
# stopped by the limit, the run with it trains; its step time is printed against the bound max(compute, the
# moments' bytes over the disk's read + write bandwidth, measured by dd in
# the same run).
#
# usage: bench/offload/cgroup_bench.sh [BUILD_DIR] [DIR] [STEPS] [MODEL ARGS...]
# Prints a table; docs/performance.md "Optimizer offload" has results.
set -euo pipefail
build=${1:-build}
dir=${2:-}
steps=${3:-4}
shift $(($# < 3 ? $# : 3))
model=("$@")
[[ ${#model[@]} -gt 0 ]] || model=(--layers 8 --channels 640 --heads 8 --seq 64 --micro-batch 2)
bin="$build/bin/train_gpt"
[[ -x "$bin" ]] || { echo "no $bin: build first" >&2; exit 1; }
# shellcheck source=bench/offload/cgroup_env.sh
source "$(dirname "$0")/cgroup_env.sh"
own=""
if [[ -z "$dir" ]]; then
    dir=$(mktemp -d)
    own=$dir
fi
tmp=$(mktemp -d)
cg="$cg_parent/msrun-offload-bench-$$"
cleanup() {
    [[ -d "$cg" ]] && rmdir "$cg" 2>/dev/null
    rm -rf "$tmp" "$dir/dd.bin"
    [[ -z "$own" ]] || rm -rf "$own"
}
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { cleanup; }' EXIT

# limited LIMIT ARGS...: train_gpt in a fresh cgroup of LIMIT bytes; prints
# "exit ms/step peak-bytes"
limited() {
    local limit=$1 rc=0
    shift
    cg_make "$cg" "$limit"
    bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$cg" timeout 1200 "$bin" \
        "${model[@]}" --steps "$steps" "$@" >/dev/null 2>"$tmp/err" || rc=$?
    local ms peak
    ms=$(sed -n 's/.*after the first: \([0-9.]*\) ms\/step.*/\1/p' "$tmp/err")
    peak=$(cat "$cg/$cg_peak_file" 2>/dev/null || echo 0)
    rmdir "$cg"
    echo "$rc ${ms:--} $peak"
}
# unlimited ARGS...: prints "peak-RSS-bytes params"
unlimited() {
    timeout 1200 "$bin" "${model[@]}" --steps 2 --report "$@" >/dev/null 2>"$tmp/err"
    echo "$(($(sed -n 's/.*peak RSS \([0-9]*\) KiB.*/\1/p' "$tmp/err") * 1024))" \
        "$(sed -n 's/^train_gpt: model of \([0-9]*\) parameters.*/\1/p' "$tmp/err")"
}
off=(--offload "optimizer=disk:$dir")
read -r need_mem params < <(unlimited)
read -r need_off _ < <(unlimited "${off[@]}")
# the offloaded run's need and a tenth, kept below the in-memory one's
limit=$((need_off + need_off / 10))
[[ $limit -lt $need_mem ]] || { echo "the offload saves too little here to show" >&2; exit 1; }
state=$((16 * params)) # parameters, gradients, m and v in fp32
M=$((8 * params))
mb=$(((M + 4194303) / 4194304))
dd_s() { sed -n 's/.* copied, \([0-9.e-]*\) s,.*/\1/p'; }
w_s=$(dd if=/dev/zero of="$dir/dd.bin" bs=4M count="$mb" oflag=direct conv=fsync 2>&1 | dd_s)
r_s=$(dd if="$dir/dd.bin" of=/dev/null bs=4M iflag=direct 2>&1 | dd_s)
rm -f "$dir/dd.bin"
io_ms=$(awk -v b="$((mb * 4194304))" -v w="$w_s" -v r="$r_s" -v M="$M" \
    'BEGIN { printf "%.1f", 1000 * (M / (b / w) + M / (b / r)) }')
read -r rc_mem ms_mem peak_mem < <(limited $limit)
read -r rc_off ms_off peak_off < <(limited $limit "${off[@]}")
# compute: the in-memory step without a limit
timeout 1200 "$bin" "${model[@]}" --steps "$steps" >/dev/null 2>"$tmp/err"
ms_free=$(sed -n 's/.*after the first: \([0-9.]*\) ms\/step.*/\1/p' "$tmp/err")
awk -v P="$params" -v S="$state" -v L="$limit" -v nm="$need_mem" -v no="$need_off" -v io="$io_ms" \
    -v c="$ms_free" 'BEGIN {
    printf "model: %d parameters, full training state %.1f MB; peak RSS unlimited: %.1f MB in memory, %.1f MB offloaded\n",
        P, S / 1e6, nm / 1e6, no / 1e6
    printf "limit: %.1f MB (%.2f of the full state); compute %.1f ms/step, the moments'"'"' I/O %.1f ms/step\n",
        L / 1e6, L / S, c, io }'
printf '| %-8s | %6s | %9s | %14s | %9s | %7s |\n' mode exit "ms/step" "cgroup peak MB" "bound ms" \
    "x bound"
printf '|----------|--------|-----------|----------------|-----------|---------|\n'
for row in "memory $rc_mem $ms_mem $peak_mem" "disk $rc_off $ms_off $peak_off"; do
    read -r mode rc ms peak <<<"$row"
    awk -v m="$mode" -v rc="$rc" -v ms="$ms" -v p="$peak" -v c="$ms_free" -v io="$io_ms" 'BEGIN {
        b = c > io ? c : io
        if (ms == "-") printf "| %-8s | %6s | %9s | %14.1f | %9.1f | %7s |\n", m, rc, "-", p / 1e6, b, "-"
        else printf "| %-8s | %6s | %9.1f | %14.1f | %9.1f | %7.2f |\n", m, rc, ms, p / 1e6, b, ms / b }'
done
