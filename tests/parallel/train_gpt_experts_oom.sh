#!/usr/bin/env bash
# The experts under ZeRO-3 out of memory (experts_oom_worker.c): on 2
# ranks (one replica group of 2) and on 4 with ep 2 (two groups of 2),
# each allocation of one rank from the experts' set-up (made again on a
# trainer that took a step) through two steps (their gathers, prefetches
# and reduce-scatters) fails in turn; the last round, where none failed,
# trains. In every other round every rank ends alike, out of
# memory, the failing rank saying so and every other naming it, none
# left waiting (the communicators' deadline, MSR_TIMEOUT, is short: a
# rank that waited would fail otherwise, and the script's limit would
# find a hang), nothing leaked (the sanitizer build checks).
set -euo pipefail
source "$(dirname "$0")/oom_env.sh"
# run RANKS WHO EP: the worker on RANKS ranks, rank WHO failing
run() {
    local ranks=$1 who=$2 ep=$3
    ckpt_worker "$ranks" 300 experts_oom_worker "$who" "$ep" ||
        fail "$ranks ranks, rank $who out of memory: $(tail -20 "$work/log")"
    oom_worker_ok "$ranks ranks, rank $who" \
        "experts oom: each of rank $who's [0-9]+ allocations failed in turn, every rank alike" \
        "ok experts oom"
    # the experts' own allocations among those failed: every rank names them
    for ((r = 0; r < ranks; r++)); do
        grep -Eq "round [0-9]+: rank $r: MSR_ERR_NO_MEMORY: .*expert" "$work/log" ||
            fail "$ranks ranks, rank $who: rank $r never failed on the experts: $(tail -5 "$work/log")"
    done
    grep "experts oom:" "$work/log"
}
run 2 1 1
run 4 2 2
echo "train_gpt_experts_oom: ok"
