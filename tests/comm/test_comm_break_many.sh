#!/bin/bash
# Many communicators made and broken on one engine
# (tests/comm/comm_break_many.c, 2 ranks, 30 rounds of 4 messages left
# unreceived on a dup that then breaks): the messages queued for a closed
# communicator are dropped at its close (MSR_COMM_CLOSE_DRAIN at most), so
# rank 0's world engine finds none of them left at its own close however
# many rounds ran; with the bound at the round's 4 all go, one past it (3)
# leaves exactly one per round, and 0 (no drain) all of them.
. "$(dirname "$0")/../integration/lib.sh"
ROUNDS=30

# left DRAIN: runs the rounds with MSR_COMM_CLOSE_DRAIN=DRAIN ("" unset)
# and sets LEFT to the messages rank 0's world engine found at its close
left() {
    local name="break many, drain ${1:-default}"
    MSR_COMM_CLOSE_DRAIN=$1 MSR_LOG_LEVEL=debug run_msrun --worker_num=2 --local_worker_num=2 \
        "$BUILD/tests/comm_break_many" "$ROUNDS"
    expect_code 0 "$name"
    expect_not_in "FAIL" "$TMP/err" "$name"
    expect_in "ok break many: $ROUNDS rounds, 4 messages left each" "$TMP/out" "$name"
    expect_not_in "was not matched" "$TMP/out" "$name"
    LEFT=$(sed -n 's/^\[node 0 rank 0\] .*engine w[0-9]*: [0-9]* notices drained at its close (and \([0-9]*\) messages.*/\1/p' \
        "$TMP/err" | tail -1)
    [ -n "$LEFT" ] || fail "$name: no drain line of rank 0's world engine"
    no_leftovers "$name"
}

left ""
[ "${LEFT:-x}" = 0 ] || fail "break many: rank 0's world engine found ${LEFT:-no} messages at its close, want 0"
left 4
[ "${LEFT:-x}" = 0 ] || fail "break many, drain 4: ${LEFT:-no} messages left, want 0"
left 3
[ "${LEFT:-x}" = "$ROUNDS" ] || fail "break many, drain 3: ${LEFT:-no} messages left, want $ROUNDS"
left 0
[ "${LEFT:-x}" = $((ROUNDS * 4)) ] || fail "break many, no drain: ${LEFT:-no} messages left, want $((ROUNDS * 4))"
ok "break many: the messages of closed communicators are dropped at their close, the queue bounded"
exit "$FAILED"
