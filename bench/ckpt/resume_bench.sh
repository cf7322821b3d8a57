#!/bin/bash
# train_gpt --resume on each of its load paths against dd reading the same
# files past the page cache (iflag=direct bs=4M), in the same run:
#   1 process          one process saved, one process loads
#   dp 2               2 data-parallel ranks (ZeRO 0) saved, the same 2 load
#   tp 2               2 tensor-parallel ranks saved, the same 2 load
#   dp 2 -> tp 2       the dp 2 checkpoint loaded into tensor parallel 2
#                      (a resharding load into another layout)
#   dp 2 -> 1 process  the dp 2 checkpoint loaded by one process (another
#                      world size)
#   tp 2 -> 1 process  the tp 2 checkpoint loaded by one process
#   1 process -> tp 2  the one process's checkpoint loaded by tp 2
#   1 process -> dp 2  the one process's checkpoint loaded by dp 2 (ZeRO 0:
#                      its replicas split the reads and share them)
#   tp 2 -> dp 2       the tp 2 checkpoint loaded by dp 2 (ZeRO 0)
# The model is the GPT of 29.1 M parameters ckpt_bench.sh uses (12 layers,
# 448 channels): 349 MB of state (parameters and AdamW's m and v). Each
# checkpoint is saved once; then, RUNS times, each load and dd's reads of
# the checkpoint's rank files (one after the other, their seconds summed)
# alternate, the page cache dropped before each when this user can (root:
# echo 3 > /proc/sys/vm/drop_caches), else the table says "warm". The load's
# seconds are train_gpt's own: rank 0's "resumed from step S under DIR in
# X s" (finding the newest complete step, then loading and checking it) and
# its "in Y s of CPU" (rank 0's CPU time over the same span, all its
# threads); dd's CPU is its user and system time. On a loaded machine the
# wall time holds the waits for a core; the CPU time does not. Each figure
# is the median of RUNS; "% of dd" is dd's wall seconds over the load's
# wall seconds, "CPU % of dd" dd's wall seconds over the load's CPU seconds
# (how fast the load would be if only its own work counted). "rank 0 MB"
# is what rank 0's readers took from the files (its "D from the files":
# whole blocks and reads ahead), beside the checkpoint's bytes.
#   bench/ckpt/resume_bench.sh [RUNS] [CPUS] [DIR]
#   (defaults 3, all, a new folder under $TMPDIR)
# CPUS: a taskset list every process runs on; DIR: a folder on the disk
# to measure; MSRUN_BUILD: the build directory (default build).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-3}
b=${MSRUN_BUILD:-build}/bin
[ -x "$b/msrun" ] && [ -x "$b/train_gpt" ] ||
    { echo "build first: cmake -B build && cmake --build build" >&2; exit 2; }
. bench/ckpt/bench_common.sh
bench_setup resume_bench "${2:-}" "${3:-}"

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
resume() { # NP DIR ARGS...: train_gpt's wall and CPU seconds to resume from step 1 under DIR,
    # and the bytes rank 0 read from the files
    local n=$1 dir=$2 s c k
    shift 2
    tg "$n" "$dir" --steps 1 --resume "$@" >"$tmp/log" || true
    s=$(sed -n 's/.*train_gpt: resumed from step 1 under .* in \([0-9.]*\) s .*/\1/p' "$tmp/log")
    c=$(sed -n 's/.*train_gpt: rank 0 read .* in \([0-9.]*\) s of CPU$/\1/p' "$tmp/log")
    k=$(sed -n 's/.*train_gpt: rank 0 read .*, \([0-9]*\) from the files, in .*/\1/p' "$tmp/log")
    [ -n "$s" ] && [ -n "$c" ] && [ -n "$k" ] ||
        { cat "$tmp/log" >&2; echo "train_gpt --resume failed" >&2; exit 1; }
    echo "$s $c $k"
}
ddsecs() { # DIR: dd's wall and CPU seconds reading DIR's step's rank files, one after the other
    local f t=0 c=0 out s u
    for f in "$1"/step-1/rank-*.bin; do
        out=$({ TIMEFORMAT='cpu %U %S' && time "${pin[@]}" dd if="$f" of=/dev/null iflag=direct \
            bs=4M; } 2>&1)
        s=$(echo "$out" | sed -n 's/.* copied, \([0-9.e-]*\) s.*/\1/p')
        u=$(echo "$out" | sed -n 's/^cpu \([0-9.]*\) \([0-9.]*\)$/\1 + \2/p')
        t=$(echo "$t + $s" | bc -l)
        c=$(echo "$c + $u" | bc -l)
    done
    echo "$t $c"
}
bytes() { cat "$1"/step-1/rank-*.bin | wc -c; }

save 1 "$tmp/one"
save 2 "$tmp/dp2"
save 2 "$tmp/tp2" --tp 2
# NAME NP DIR ARGS...: one run of a row: the load, then dd
measure() {
    local name=$1 n=$2 dir=$3
    shift 3
    drop
    resume "$n" "$tmp/$dir" "$@" >>"$tmp/$name.load"
    drop
    ddsecs "$tmp/$dir" >>"$tmp/$name.dd"
}
for ((i = 0; i < runs; i++)); do
    measure one 1 one
    measure dp2 2 dp2
    measure tp2 2 tp2 --tp 2
    measure dp2tp2 2 dp2 --tp 2
    measure dp2to1 1 dp2
    measure tp2to1 1 tp2
    measure onetp2 2 one --tp 2
    measure onedp2 2 one
    measure tp2dp2 2 tp2
done
med() { # FILE COLUMN: the median of a column
    awk -v k="$2" '{print $k}' "$tmp/$1" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
row() { # NAME FILE DIR: a row of the table
    local s c d dc n k
    s=$(med "$2.load" 1)
    c=$(med "$2.load" 2)
    k=$(med "$2.load" 3)
    d=$(med "$2.dd" 1)
    dc=$(med "$2.dd" 2)
    n=$(bytes "$3")
    printf "| %-24s | %10d | %9.1f | %7.3f | %7.3f | %7.0f | %7.3f | %7.3f | %7.0f | %5.0f%% | %5.0f%% |\n" \
        "$1" "$n" "$(echo "$k / 1000000" | bc -l)" "$s" "$c" "$(echo "$n / $s / 1000000" | bc -l)" "$d" "$dc" \
        "$(echo "$n / $d / 1000000" | bc -l)" "$(echo "100 * $d / $s" | bc -l)" \
        "$(echo "100 * $d / $c" | bc -l)"
}
printf "train_gpt --resume, a GPT of 29.1 M parameters; median of %d runs; cpus %s; reads %s\n\n" \
    "$runs" "${2:-all}" "$([ $cold = 1 ] && echo "cold (page cache dropped)" || echo "warm")"
printf "| %-24s | %10s | %9s | %7s | %7s | %7s | %7s | %7s | %7s | %6s | %6s |\n" "load path" "bytes" \
    "rank 0 MB" "load s" "CPU s" "MB/s" "dd s" "CPU s" "MB/s" "% dd" "CPU %"
printf "|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n" "--------------------------" "-----------:" "----------:" \
    "--------:" "--------:" "--------:" "--------:" "--------:" "--------:" "-------:" "-------:"
row "1 process" one "$tmp/one"
row "dp 2" dp2 "$tmp/dp2"
row "tp 2" tp2 "$tmp/tp2"
row "dp 2 -> tp 2 (resharded)" dp2tp2 "$tmp/dp2"
row "dp 2 -> 1 process" dp2to1 "$tmp/dp2"
row "tp 2 -> 1 process" tp2to1 "$tmp/tp2"
row "1 process -> tp 2" onetp2 "$tmp/one"
row "1 process -> dp 2" onedp2 "$tmp/one"
row "tp 2 -> dp 2" tp2dp2 "$tmp/tp2"
printf "\nresharded / same-layout load, wall (CPU): tp 2 from dp 2 %.2f (%.2f), from 1 process " \
    "$(echo "$(med dp2tp2.load 1) / $(med tp2.load 1)" | bc -l)" \
    "$(echo "$(med dp2tp2.load 2) / $(med tp2.load 2)" | bc -l)"
printf "%.2f (%.2f); 1 process from tp 2 %.2f (%.2f)\n" \
    "$(echo "$(med onetp2.load 1) / $(med tp2.load 1)" | bc -l)" \
    "$(echo "$(med onetp2.load 2) / $(med tp2.load 2)" | bc -l)" \
    "$(echo "$(med tp2to1.load 1) / $(med one.load 1)" | bc -l)" \
    "$(echo "$(med tp2to1.load 2) / $(med one.load 2)" | bc -l)"
