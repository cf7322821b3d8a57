#!/bin/bash
# What a checkpoint costs the steps, synchronous and with --ckpt-async,
# against no checkpoint, in the same run: train_gpt (the GPT of 29.1 M
# parameters ckpt_bench.sh uses: 349 MB of state, parameters and AdamW's
# m and v) trains 6 steps on NP ranks, saving at steps 2, 4 and 6, the
# three modes alternating RUNS times. Per mode, the medians of:
#   save ms      train_gpt's "ms in the steps" over its 3 checkpoints: the
#                whole save (synchronous), or the stall (--ckpt-async: the
#                snapshot's start and the next update's wait for the copy,
#                and any wait for the write before)
#   most ms      its "at most for one": the largest of one checkpoint
#   step ms      its "after the first" ms/step: the steps' own time, the
#                saves not counted (with --ckpt-async the writer copies,
#                checksums and writes beside them)
# and the stall as a share of the synchronous save. NP 1 (the default)
# leaves the writer a core of its own on a 2-core machine; with more ranks
# than cores its work lands in the steps instead.
#   bench/ckpt/async_bench.sh [NP] [RUNS] [DIR]
#   (defaults 1, 3, a new folder under $TMPDIR)
# MSRUN_BUILD: the build directory (default build). OFFLOAD: every run
# with state in files under DIR, which --ckpt-async streams from rather
# than copies: 1 or optimizer, AdamW's moments (--offload
# optimizer=disk); params, the parameters' blocks (params=disk); all,
# both.
set -euo pipefail
cd "$(dirname "$0")/../.."
np=${1:-1}
runs=${2:-3}
b=${MSRUN_BUILD:-build}/bin
[ -x "$b/msrun" ] && [ -x "$b/train_gpt" ] ||
    { echo "build first: cmake -B build && cmake --build build" >&2; exit 2; }
tmp=$(mktemp -d "${3:-${TMPDIR:-/tmp}}/async_bench.XXXXXX")
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$tmp"; }' EXIT
off=()
offname=
case ${OFFLOAD:-0} in
0) ;;
1 | optimizer) off=(--offload "optimizer=disk:$tmp/off") offname="AdamW's moments" ;;
params) off=(--offload "params=disk:$tmp/off") offname="the parameters' blocks" ;;
all) off=(--offload "params=disk:$tmp/off,optimizer=disk:$tmp/off")
    offname="the parameters' blocks and AdamW's moments" ;;
*) echo "OFFLOAD: 0, 1, optimizer, params or all, not $OFFLOAD" >&2; exit 2 ;;
esac
if [ ${#off[@]} -gt 0 ]; then mkdir "$tmp/off"; fi
tg() { # ARGS...: train_gpt's lines about its steps and its checkpoints
    rm -rf "$tmp/ck"
    "$b/msrun" --worker_num="$np" --local_worker_num="$np" --log_level=warn "$b/train_gpt" \
        --layers 12 --channels 448 --heads 4 --seq 64 --micro-batch 4 --steps 6 --threads 1 \
        --zero 3 "${off[@]}" "$@" 2>&1 | grep 'checkpoints:\|ms/step' ||
        { echo "train_gpt failed" >&2; exit 1; }
}
ms() { sed -n "s/.*[:,] \([0-9.]*\) ms $1.*/\1/p"; } # WHAT: train_gpt's ms of WHAT
for ((i = 0; i < runs; i++)); do
    for mode in none sync async; do
        case $mode in
        none) line=$(tg) ;;
        sync) line=$(tg --ckpt-dir "$tmp/ck" --ckpt-every 2) ;;
        async) line=$(tg --ckpt-dir "$tmp/ck" --ckpt-every 2 --ckpt-async) ;;
        esac
        echo "$line" | sed -n 's/.*after the first: \([0-9.]*\) ms\/step.*/\1/p' >>"$tmp/$mode.step"
        [ $mode = none ] && continue
        echo "$line" | ms "in the steps" >>"$tmp/$mode.save"
        echo "$line" | ms "at most for one" >>"$tmp/$mode.most"
    done
done
med() { sort -g "$tmp/$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf "train_gpt, a GPT of 29.1 M parameters (349 MB of state), ZeRO 3 over %d ranks%s;\n" "$np" \
    "$([ ${#off[@]} -gt 0 ] && echo ", $offname in files")"
printf "6 steps saving at 2, 4 and 6; median of %d runs\n\n" "$runs"
printf "| %-14s | %10s | %8s | %8s |\n" "" "3 saves ms" "most ms" "step ms"
printf "|%s|%s|%s|%s|\n" "----------------" "-----------:" "---------:" "---------:"
printf "| %-14s | %10s | %8s | %8.1f |\n" "no checkpoint" "" "" "$(med none.step)"
printf "| %-14s | %10.1f | %8.1f | %8.1f |\n" "synchronous" "$(med sync.save)" "$(med sync.most)" \
    "$(med sync.step)"
printf "| %-14s | %10.1f | %8.1f | %8.1f |\n" "--ckpt-async" "$(med async.save)" \
    "$(med async.most)" "$(med async.step)"
printf "\n--ckpt-async stall: %.1f%% of the synchronous save (the most of one against the most of one)\n" \
    "$(echo "100 * $(med async.most) / $(med sync.most)" | bc -l)"
