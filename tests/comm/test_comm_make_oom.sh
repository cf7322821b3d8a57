#!/bin/bash
# Out of memory while a communicator is made (tests/comm/comm_make_oom.c) on
# 4 ranks of one node: each allocation of a split's and of a dup's, on job
# rank 0 (which makes the shared-memory segment) and on job rank 3 (which
# maps it), fails in turn; every member fails at once and alike, the others
# naming the failing rank and the cause, the segment's own allocation among
# them; a communicator that was made works on every member. Then the same
# for dups with MSR_COMM_OWN_WORKER.
# MSR_TIMEOUT=20: a member left waiting for the failing one instead of
# failing at once meets its deadline (MSR_ERR_TIMEOUT, a failure here)
# within the test's time.
. "$(dirname "$0")/../integration/lib.sh"
export MSR_TIMEOUT=20

# make_oom WHAT CALLS [ARG]: one run, its checks for each call of CALLS
make_oom() {
    local name=$1 calls=$2 call who what r
    run_msrun --worker_num=4 --local_worker_num=4 "$BUILD/tests/comm_make_oom" ${3:-}
    cat "$TMP/out"
    expect_code 0 "$name"
    expect_not_in "FAIL" "$TMP/err" "$name"
    # the parts of a failed agreement that a member never received are
    # dropped when its engine closes: UCX (on standard output) warns of none
    expect_not_in "was not matched" "$TMP/out" "$name"
    expect_not_in "was not matched" "$TMP/err" "$name"
    for call in $calls; do
        for who in 0 3; do
            what="$name: $call, rank $who"
            for r in 0 1 2 3; do
                if [ "$r" = "$who" ]; then
                    expect_in "make oom $call, rank $who's segment: rank $r: .*out of memory for its shared-memory segment" \
                        "$TMP/out" "$what"
                else
                    expect_in "make oom $call, rank $who's segment: rank $r: .*(job rank $who) failed to set up its shared-memory segment (out of memory)" \
                        "$TMP/out" "$what"
                fi
            done
            expect_in "$call allocations: each of rank $who's [0-9]* failed in turn, every rank alike" \
                "$TMP/out" "$what"
        done
    done
    expect_in "ok make oom" "$TMP/out" "$name"
}

make_oom "make oom" "split dup"
# the dups with MSR_COMM_OWN_WORKER: an engine of their own, its opening
# and its address exchange failing too (a member failing before it
# published its address once left the others waiting until MSR_TIMEOUT)
# A member whose own engine went (its dup failed) may still be sent a
# relayed abort notice, or reached by an operation: connecting to its gone
# shared-memory FIFO fails in UCX (said in a debug line for a notice),
# whose error path leaks a few small blocks in libuct (see ucx_leave.supp;
# read by LeakSanitizer only).
LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")" && pwd)/ucx_leave.supp" \
    make_oom "make oom, own worker" "dup" own
no_leftovers "make oom"
ok "make oom: each allocation of a split and a dup failing, every member fails at once, naming it"
exit "$FAILED"
