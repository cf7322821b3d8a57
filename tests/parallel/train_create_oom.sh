#!/usr/bin/env bash
# A trainer's creation out of memory on one rank (create_oom_worker.c):
# dp 2 at ZeRO 0 (a dense model), dp 2 at ZeRO-3 (every second block MoE,
# the experts sharded), tp 2 x pp 2 on 4 ranks (ZeRO 1, the tied
# embedding across the pipeline) and the same at ZeRO-3 (the first
# stage's gather for the embedding's first send), dp 2 x pp 2 at ZeRO-3
# (that gather over each stage's dp group), and dp's state alone at
# ZeRO-3 (msr_dp_create_agreed, no trainer), cp 2 (ZeRO 1) and ep 2 on 4
# ranks (ZeRO-3, every block MoE). Rank WHO's allocations in the creation
# are counted, then each sampled one fails in turn (every EVERY-th, the
# first and the last, then one past them until none fails; EVERY 1: all
# of them, a few dozen here): in every round every rank ends alike,
# out of memory, the failing rank saying so and every other naming it,
# none left waiting (the communicators' deadline, MSR_TIMEOUT, is short:
# a rank that waited would fail otherwise, and the script's limit would
# find a hang), nothing leaked (the sanitizer build checks); the next
# creation works, and the last round, where none failed, trains a step.
set -euo pipefail
source "$(dirname "$0")/oom_env.sh"
# run RANKS WHO LAYOUT EVERY: the worker on RANKS ranks, rank WHO failing
run() {
    local ranks=$1 who=$2 layout=$3 every=$4
    local named="train: rank $who is out of memory creating its trainer"
    [[ $layout != dpz3 ]] || named="dp: rank $who is out of memory creating its data-parallel state"
    ckpt_worker "$ranks" 300 create_oom_worker "$who" "$layout" "$every" ||
        fail "$layout, rank $who out of memory: $(tail -20 "$work/log")"
    oom_worker_ok "$layout, rank $who" \
        "create oom $layout: [0-9]+ of rank $who's [0-9]+ allocations failed in turn, every rank alike" \
        "ok create oom"
    # every other rank named the failing one in the creation's agreement
    for ((r = 0; r < ranks; r++)); do
        [[ $r -eq $who ]] && continue
        grep -Eq "round [0-9]+: rank $r: MSR_ERR_NO_MEMORY: $named" \
            "$work/log" || fail "$layout: rank $r never named rank $who: $(tail -5 "$work/log")"
    done
    grep "create oom $layout:" "$work/log"
}
run 2 1 z0 1
run 2 0 z3 1
run 4 3 tp2pp2 1
run 4 0 tp2pp2 2
run 4 0 tp2pp2z3 1
run 4 3 tp2pp2z3 2
run 4 2 dp2pp2z3 1
run 2 1 dpz3 1
run 2 1 cp2 3
run 4 2 ep2 3
echo "train_create_oom: ok"
