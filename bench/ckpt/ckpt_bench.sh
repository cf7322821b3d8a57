#!/bin/bash
# Checkpoint save and load throughput side by side with the disk's own
# sequential write and read of the same bytes, in the same run:
#   save         NP ranks save their shares (ckpt_bench save: pieces' CRCs,
#                libmsrun's atomic write, fsync, commit)
#                / dd of the same bytes with conv=fdatasync
#   save async   the same through a writer thread (ckpt_bench save-async:
#                the time until the step is durable, and the step's stall)
#   load         NP ranks load their own files (same layout)
#                / dd reading the file dd wrote
#   resharded    NP2 ranks load the NP ranks' checkpoint, each reading only
#                the pieces of its share (another layout and world size)
#   train_gpt    a real checkpoint: train_gpt (a GPT of 29.1 M parameters,
#                ZeRO-3 over NP ranks) trains 3 steps saving after each,
#                without and with --ckpt-async, timing a save (its "ms in
#                the steps" and "written in the background" over 3); the
#                stall is its "at most for one": with --ckpt-async the
#                writer copies the state while the next step computes and
#                that step's update waits for the copy. The steps' own time
#                (its "after the first", steps 2-3) without checkpoints,
#                with synchronous ones (not counted in it) and with
#                --ckpt-async (the writer beside them)
#                / dd of the same bytes with conv=fdatasync (three writes,
#                as three saves); and resumes from
#                that checkpoint (its "resumed from step 3 under DIR in X s")
#                / dd reading the file dd wrote
# Before every read the page cache is dropped when this user can
# (root: echo 3 > /proc/sys/vm/drop_caches); otherwise both sides read from
# the page cache, and the table says so. Each row is the median of RUNS
# runs, the runs alternating between msrun and dd.
#   bench/ckpt/ckpt_bench.sh [NP] [NP2] [PARAMS] [RUNS] [CPUS] [DIR]
#   (defaults 4, 3, 30000000, 5, all, a new folder under $TMPDIR)
# PARAMS: the model's parameters (12 bytes of state each: parameters and
# AdamW's m and v); CPUS: a taskset list every process runs on, msrun's
# ranks and dd alike (the ranks inherit msrun's affinity: NP ranks share
# the cores dd has to itself, so a list shorter than NP charges the ranks'
# own work, the CRCs and copies, to the checkpoint's time); DIR: a
# folder on the disk to measure (emptied of what the bench writes);
# MSRUN_BUILD: the build directory (default build).
set -euo pipefail
cd "$(dirname "$0")/../.."
np=${1:-4}
np2=${2:-3}
params=${3:-30000000}
runs=${4:-5}
cpus=${5:-}
b=${MSRUN_BUILD:-build}/bin
[ -x "$b/msrun" ] && [ -x "$b/ckpt_bench" ] ||
    { echo "build first: cmake -B build && cmake --build build" >&2; exit 2; }
[ "$np" != "$np2" ] || { echo "NP2 must differ from NP (a resharded load)" >&2; exit 2; }
. bench/ckpt/bench_common.sh
bench_setup ckpt_bench "$cpus" "${6:-}"
msrun_() { # NP ARGS...: rank 0's line of ckpt_bench under msrun
    local n=$1
    shift
    "${pin[@]}" "$b/msrun" --worker_num="$n" --local_worker_num="$n" --log_level=warn \
        "$b/ckpt_bench" "$@" 2>"$tmp/err" || { cat "$tmp/err" >&2; echo "failed: $*" >&2; exit 1; }
}
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; } # KEY: a value of a ckpt_bench line
ddsecs() { # DD ARGS...: dd's seconds
    "${pin[@]}" dd "$@" 2>&1 | sed -n 's/.* copied, \([0-9.]*\) s.*/\1/p'
}

tg_() { # ARGS...: train_gpt's lines about its steps and its checkpoints
    "${pin[@]}" "$b/msrun" --worker_num="$np" --local_worker_num="$np" --log_level=warn \
        "$b/train_gpt" --layers 12 --channels 448 --heads 4 --seq 16 --micro-batch 1 \
        --steps 3 --zero 3 --threads 1 "$@" 2>&1 |
        grep 'checkpoints:\|ms/step' || { echo "train_gpt failed" >&2; exit 1; }
}
step_ms() { sed -n 's/.*after the first: \([0-9.]*\) ms\/step.*/\1/p'; }
tg_resume() { # train_gpt's seconds to resume from the checkpoint under $tmp/tg (its own
    # "resumed from step S under DIR in X s"), then one step
    "${pin[@]}" "$b/msrun" --worker_num="$np" --local_worker_num="$np" --log_level=warn \
        "$b/train_gpt" --layers 12 --channels 448 --heads 4 --seq 16 --micro-batch 1 \
        --steps 4 --zero 3 --threads 1 --ckpt-dir "$tmp/tg" --resume 2>&1 |
        sed -n 's/.*train_gpt: resumed from step 3 under .* in \([0-9.]*\) s .*/\1/p' | grep . ||
        { echo "train_gpt --resume failed" >&2; exit 1; }
}
ms() { sed -n "s/.*[:,] \([0-9.]*\) ms $1.*/\1/p"; } # WHAT: train_gpt's ms of WHAT
ck=$tmp/ck
for ((i = 0; i < runs; i++)); do
    rm -rf "$ck" "$tmp/ck_async" "$tmp/dd"
    line=$(msrun_ "$np" save "$ck" "$params")
    echo "$line" | field s >>"$tmp/save"
    bytes=$(echo "$line" | field bytes)
    ddsecs if=/dev/zero of="$tmp/dd" bs=4M iflag=count_bytes count="$bytes" conv=fdatasync \
        >>"$tmp/dd_write"
    line=$(msrun_ "$np" save-async "$tmp/ck_async" "$params")
    echo "$line" | field s >>"$tmp/save_async"
    echo "$line" | field stall_s >>"$tmp/stall"
    rm -rf "$tmp/ck_async"
    drop
    msrun_ "$np" load "$ck" "$params" | field s >>"$tmp/load"
    drop
    ddsecs if="$tmp/dd" of=/dev/null bs=4M >>"$tmp/dd_read"
    drop
    msrun_ "$np2" reshard "$ck" "$params" | field s >>"$tmp/reshard"
    rm -rf "$tmp/tg" "$tmp/dd"
    tg_ | step_ms >>"$tmp/tg_step_none"
    line=$(tg_ --ckpt-dir "$tmp/tg" --ckpt-every 1)
    echo "$line" | ms "in the steps" | awk '{print $1 / 3000}' >>"$tmp/tg_save"
    echo "$line" | step_ms >>"$tmp/tg_step_sync"
    tgbytes=$(cat "$tmp"/tg/step-3/rank-*.bin | wc -c)
    for k in 1 2 3; do # as many writes as the saves, a save's time each
        rm -f "$tmp/dd"
        ddsecs if=/dev/zero of="$tmp/dd" bs=4M iflag=count_bytes count="$tgbytes" conv=fdatasync
    done | awk '{s += $1} END {print s / 3}' >>"$tmp/tg_dd"
    drop
    tg_resume >>"$tmp/tg_resume"
    drop
    ddsecs if="$tmp/dd" of=/dev/null bs=4M >>"$tmp/tg_dd_read"
    rm -rf "$tmp/tg"
    line=$(tg_ --ckpt-dir "$tmp/tg" --ckpt-every 1 --ckpt-async)
    echo "$line" | ms "at most for one" | awk '{print $1 / 1000}' >>"$tmp/tg_stall"
    echo "$line" | step_ms >>"$tmp/tg_step_async"
    stall=$(echo "$line" | ms "in the steps")
    echo "$line" | ms "written in the background" | awk -v s="$stall" '{print (s + $1) / 3000}' \
        >>"$tmp/tg_async"
done
med() { sort -g "$tmp/$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mbs() { echo "$bytes / $1 / 1000000" | bc -l; } # SECONDS: MB/s of $bytes
row() { # NAME FILE DDFILE: a row of the table
    local s d
    s=$(med "$2")
    d=$(med "$3")
    printf "| %-32s | %8.3f | %8.0f | %8.3f | %8.0f | %5.0f%% |\n" "$1" "$s" "$(mbs "$s")" "$d" \
        "$(mbs "$d")" "$(echo "100 * $d / $s" | bc -l)"
}
printf "checkpoint throughput: %d parameters, %d bytes in %d files; save and load by %d ranks,\n" \
    "$params" "$bytes" "$np" "$np"
printf "resharded load by %d; median of %d runs; cpus %s (ranks and dd alike); reads %s\n\n" \
    "$np2" "$runs" "${cpus:-all}" \
    "$([ $cold = 1 ] && echo "after dropping the page cache" || echo "from the page cache")"
printf "| %-32s | %8s | %8s | %8s | %8s | %6s |\n" "" "msrun s" "MB/s" "dd s" "MB/s" "% disk"
printf "|%s|%s|%s|%s|%s|%s|\n" "----------------------------------" "---------:" "---------:" \
    "---------:" "---------:" "-------:"
row "save" save dd_write
row "save async (durable)" save_async dd_write
row "load, same layout" load dd_read
row "load, resharded $np -> $np2" reshard dd_read
stall=$(med stall)
printf "\nasync stall (the step's copy): %.3f s, %.0f%% of the synchronous save\n" "$stall" \
    "$(echo "100 * $stall / $(med save)" | bc -l)"
printf "resharded load / same-layout load: %.2f\n" "$(echo "$(med reshard) / $(med load)" | bc -l)"
bytes=$tgbytes
printf "\ntrain_gpt, a GPT of 29.1 M parameters, ZeRO-3 over %d ranks: %d bytes in %d files\n\n" \
    "$np" "$bytes" "$np"
printf "| %-32s | %8s | %8s | %8s | %8s | %6s |\n" "" "msrun s" "MB/s" "dd s" "MB/s" "% disk"
printf "|%s|%s|%s|%s|%s|%s|\n" "----------------------------------" "---------:" "---------:" \
    "---------:" "---------:" "-------:"
row "train_gpt save" tg_save tg_dd
row "train_gpt --ckpt-async (durable)" tg_async tg_dd
row "train_gpt --resume (load)" tg_resume tg_dd_read
stall=$(med tg_stall)
printf "\ntrain_gpt --ckpt-async stall (the most a save held a step up: its start, and the\n"
printf "next update's wait for the copy): %.3f s, %.1f%% of the synchronous save\n" \
    "$stall" "$(echo "100 * $stall / $(med tg_save)" | bc -l)"
printf "train_gpt steps 2-3: %.1f ms/step without checkpoints, %.1f between synchronous saves\n" \
    "$(med tg_step_none)" "$(med tg_step_sync)"
printf "(not counted), %.1f with --ckpt-async's writer beside them\n" "$(med tg_step_async)"
