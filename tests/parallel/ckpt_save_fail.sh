#!/usr/bin/env bash
# A rank that fails while it saves a step (ckpt_save_fail_worker.c: its
# step folder, its file's write, header, sync and rename, each allocation
# in turn, its own code between a writer's parts, its store call of the
# states' agreement out of memory; after the states were
# agreed, rank 0's MANIFEST and its commit; the answer of its commit's
# agreement lost after the others committed), under msrun on 2 and 3
# workers, with msr_ckpt_save and with a writer: every round either saves
# as without the failure or fails on every rank, the failed rank saying
# why and the others naming it, and the step before stays the latest and
# loads; a lost answer keeps the step, whole, the latest on every rank. The store's deadline is a guard: a rank left waiting would end
# with MSR_ERR_TIMEOUT ("deadline passed"), which fails the test.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
source "$(dirname "$0")/ckpt_worker_env.sh"
# the store's deadline for the workers, a guard (msrun sets the workers' own)
worker_env=(env MSR_TIMEOUT=60 "${worker_env[@]:1}")
# lines: the worker's lines, their msrun prefix left out, into $work/lines
lines() { sed -E 's/^.*\] (rank [0-9]+: )/\1/' "$work/log" >"$work/lines"; }
# check WORLD MODE FAIL: one run, its rounds checked
check() {
    local world=$1 mode=$2 fail=$3 dir="$work/ck-$1-$2-$3" what="$1 workers, $2, rank $3 failing"
    local step reason r verb
    ckpt_worker "$world" 100 ckpt_save_fail_worker "$dir" "$mode" "$fail" ||
        fail "$what: exit $?: $(cat "$work/log")"
    ! grep -Eq "TIMEOUT|deadline passed|BAD|disagree" "$work/log" ||
        fail "$what: $(grep -E "TIMEOUT|deadline passed|BAD|disagree" "$work/log")"
    # every point saves step 2 (none succeeds before nomem's last round)
    for point in mkdir write header fsync rename manifest commit own; do
        [[ $point != own || $mode == stream ]] || continue
        [[ $point != manifest || $fail -eq 0 ]] || continue
        # after the states' agreement: the commit's names the rank
        verb=write
        [[ $point != manifest && $point != commit ]] || verb=commit
        # the errno behind it; a writer that did not open: its status
        reason="input/output error"
        [[ $point != mkdir && $point != write ]] || reason="no space left on device"
        [[ $point != mkdir || $mode != stream ]] || reason="input/output error"
        said "$fail" "round 0 $point: failed: MSR_ERR_(IO|NO_MEMORY): " "$what, $point"
        for ((r = 0; r < world; r++)); do
            said "$r" "round 0 $point: latest 1$" "$what, $point"
            [[ $r -ne $fail ]] || continue
            [[ $point != own ]] || reason="out of memory"
            said "$r" "round 0 $point: failed: MSR_ERR_[A-Z_]+: checkpoint: rank $fail could not $verb step 2 under $dir \\($reason; its log says why\\)$" \
                "$what, $point"
        done
    done
    # storemem: the states' agreement's store call out of memory before its
    # part went: a part of no bytes in its place, the others end at once
    # naming the rank (no deadline, checked above), the step before stays
    said "$fail" "round 0 storemem: failed: MSR_ERR_NO_MEMORY: " "$what, storemem"
    for ((r = 0; r < world; r++)); do
        said "$r" "round 0 storemem: latest 1$" "$what, storemem"
        [[ $r -ne $fail ]] || continue
        said "$r" "round 0 storemem: failed: MSR_ERR_[A-Z_]+: .*rank $fail gave 0 bytes" "$what, storemem"
    done
    # nomem: each failed round names the rank on the others; the last saves
    local rounds
    lines
    rounds=$(grep -Ec "^rank $fail: round [0-9]+ nomem: (ok|failed)" "$work/lines")
    ((rounds >= 2)) || fail "$what: $rounds nomem rounds: $(cat "$work/log")"
    said "$fail" "round $((rounds - 1)) nomem: ok$" "$what, the last nomem round"
    for ((i = 0; i < rounds - 1; i++)); do
        ! grep -q "^rank $fail: round $i nomem: ok$" "$work/lines" || continue
        said "$fail" "round $i nomem: failed: MSR_ERR_NO_MEMORY: " "$what, nomem round $i"
        for ((r = 0; r < world; r++)); do
            [[ $r -ne $fail ]] || continue
            grep -Eq "^rank $r: round $i nomem: failed: .*(rank $fail could not write step [0-9]+ under $dir \\(out of memory; its log says why\\)|rank $fail gave 0 bytes)" "$work/lines" ||
                fail "$what, nomem round $i: rank $r does not name rank $fail: $(cat "$work/log")"
        done
    done
    # agree: the failed rank's commit agreement ended without its answer
    # after the others committed: it keeps its files, the step is whole,
    # every rank resumes from it
    local agreed
    agreed=$(sed -nE "s/^rank $fail: round 0 agree: failed: MSR_ERR_IO: checkpoint: rank $fail's agreement on committing step ([0-9]+) under .* \\(its files of the step are kept: the step is whole if every other rank committed it; nothing pruned\\).*/\\1/p" "$work/lines")
    [[ -n $agreed ]] || fail "$what, agree: rank $fail did not fail its commit's agreement: $(cat "$work/log")"
    for ((r = 0; r < world; r++)); do
        said "$r" "round 0 agree: latest $agreed$" "$what, agree"
        [[ $r -eq $fail ]] || said "$r" "round 0 agree: ok$" "$what, agree"
    done
    echo "$what: ok ($rounds nomem rounds; agree: step $agreed kept)"
}
check 2 save 1
check 2 stream 0
check 3 save 0
check 3 stream 2
echo "checkpoint saves with a failing rank: ok"
