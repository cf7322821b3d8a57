#!/bin/bash
# train_gpt --resume on each of its load paths against dd reading the same
# files past the page cache (iflag=direct bs=4M), in the same run:
#   1 process        one process saved, one process loads
#   dp 2             2 data-parallel ranks (ZeRO 0) saved, the same 2 load
#   dp 2 -> tp 2     the dp 2 checkpoint loaded into tensor parallel 2
#                    (a resharding load into another layout)
#   dp 2 -> 1 proc   the dp 2 checkpoint loaded by one process (another
#                    world size)
# The model is the GPT of 29.1 M parameters ckpt_bench.sh uses (12 layers,
# 448 channels): 349 MB of state (parameters and AdamW's m and v). Each
# checkpoint is saved once; then, RUNS times, each load and dd's reads of
# the checkpoint's rank files (one after the other, their seconds summed)
# alternate, the page cache dropped before each when this user can (root:
# echo 3 > /proc/sys/vm/drop_caches), else the table says "warm". The load's
# seconds are train_gpt's own: rank 0's "resumed from step S under DIR in
# X s" (finding the newest complete step, then loading and checking it).
# Each row is the median of RUNS; "% of dd" is dd's seconds over the load's.
#   bench/ckpt/resume_bench.sh [RUNS] [CPUS] [DIR]
#   (defaults 3, all, a new folder under $TMPDIR)
# CPUS: a taskset list every process runs on; DIR: a folder on the disk
# to measure; MSRUN_BUILD: the build directory (default build).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-3}
cpus=${2:-}
b=${MSRUN_BUILD:-build}/bin
[ -x "$b/msrun" ] && [ -x "$b/train_gpt" ] ||
    { echo "build first: cmake -B build && cmake --build build" >&2; exit 2; }
pin=()
[ -n "$cpus" ] && pin=(taskset -c "$cpus")
if [ -n "${3:-}" ]; then
    mkdir -p "$3"
    tmp=$(mktemp -d "$3/resume_bench.XXXXXX")
else
    tmp=$(mktemp -d)
fi
trap 'rm -rf "$tmp"' EXIT

cold=1
drop() { # empties the page cache, or says it cannot
    sync
    if [ $cold = 1 ] && ! (echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then
        cold=0
        echo "(cannot drop the page cache: reads are warm, on both sides)" >&2
    fi
}
tg() { # NP DIR ARGS...: train_gpt on NP ranks with its checkpoints under DIR
    local n=$1 dir=$2
    shift 2
    "${pin[@]}" "$b/msrun" --worker_num="$n" --local_worker_num="$n" --log_level=warn \
        "$b/train_gpt" --layers 12 --channels 448 --heads 4 --seq 16 --micro-batch 1 \
        --global-batch 2 --threads 1 --ckpt-dir "$dir" "$@" 2>&1
}
save() { # NP DIR ARGS...: one step, saved at its end
    local n=$1 dir=$2
    shift 2
    tg "$n" "$dir" --steps 1 "$@" >"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
}
resume() { # NP DIR ARGS...: train_gpt's seconds to resume from step 1 under DIR
    local n=$1 dir=$2 s
    shift 2
    s=$(tg "$n" "$dir" --steps 1 --resume "$@" | tee "$tmp/log" |
        sed -n 's/.*train_gpt: resumed from step 1 under .* in \([0-9.]*\) s .*/\1/p')
    [ -n "$s" ] || { cat "$tmp/log" >&2; echo "train_gpt --resume failed" >&2; exit 1; }
    echo "$s"
}
ddsecs() { # DIR: dd's seconds reading DIR's step's rank files, one after the other
    local f t=0 s
    for f in "$1"/step-1/rank-*.bin; do
        s=$("${pin[@]}" dd if="$f" of=/dev/null iflag=direct bs=4M 2>&1 |
            sed -n 's/.* copied, \([0-9.e-]*\) s.*/\1/p')
        t=$(echo "$t + $s" | bc -l)
    done
    echo "$t"
}
bytes() { cat "$1"/step-1/rank-*.bin | wc -c; }

save 1 "$tmp/one"
save 2 "$tmp/dp2"
for ((i = 0; i < runs; i++)); do
    drop
    resume 1 "$tmp/one" >>"$tmp/one.load"
    drop
    ddsecs "$tmp/one" >>"$tmp/one.dd"
    drop
    resume 2 "$tmp/dp2" >>"$tmp/dp2.load"
    drop
    ddsecs "$tmp/dp2" >>"$tmp/dp2.dd"
    drop
    resume 2 "$tmp/dp2" --tp 2 >>"$tmp/tp2.load"
    drop
    ddsecs "$tmp/dp2" >>"$tmp/tp2.dd"
    drop
    resume 1 "$tmp/dp2" >>"$tmp/dp2to1.load"
    drop
    ddsecs "$tmp/dp2" >>"$tmp/dp2to1.dd"
done
med() { sort -g "$tmp/$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
row() { # NAME PATH DIR: a row of the table
    local s d n
    s=$(med "$2.load")
    d=$(med "$2.dd")
    n=$(bytes "$3")
    printf "| %-28s | %10d | %8.3f | %8.0f | %8.3f | %8.0f | %6.0f%% |\n" "$1" "$n" "$s" \
        "$(echo "$n / $s / 1000000" | bc -l)" "$d" "$(echo "$n / $d / 1000000" | bc -l)" \
        "$(echo "100 * $d / $s" | bc -l)"
}
printf "train_gpt --resume, a GPT of 29.1 M parameters; median of %d runs; cpus %s; reads %s\n\n" \
    "$runs" "${cpus:-all}" "$([ $cold = 1 ] && echo "cold (page cache dropped)" || echo "warm")"
printf "| %-28s | %10s | %8s | %8s | %8s | %8s | %7s |\n" "load path" "bytes" "load s" "MB/s" \
    "dd s" "MB/s" "% of dd"
printf "|%s|%s|%s|%s|%s|%s|%s|\n" "------------------------------" "-----------:" "---------:" \
    "---------:" "---------:" "---------:" "--------:"
row "1 process" one "$tmp/one"
row "dp 2" dp2 "$tmp/dp2"
row "dp 2 -> tp 2 (resharded)" tp2 "$tmp/dp2"
row "dp 2 -> 1 process" dp2to1 "$tmp/dp2"
