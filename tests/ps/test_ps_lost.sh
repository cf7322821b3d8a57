#!/bin/bash
# A worker lost without a goodbye (tests/ps/ps_lost.c), 3 workers and 2
# servers. Asynchronous (--ps_staleness=1): the servers take it as left and
# the other two workers go on past its clock + 1 to the end, every row
# counting exactly the acknowledged pushes; the job ends with 0.
# Synchronous: the servers cannot go on, the job fails, and with
# --max_restarts=1 it is started again once (generation 1) before it ends.
# killsend: the same, made by msr_ps_create, the victim ending inside a
# push (tests/ps/ps_lost.c): the others' requests are not stuck behind it.
# MSR_TIMEOUT=20: a server that held the survivors' pulls for the lost
# worker ends the run within the test's time, not after 300 s.
. "$(dirname "$0")/../integration/lib.sh"
PSL=$BUILD/tests/ps_lost
export MSR_TIMEOUT=20
# every run: 3 workers and 2 servers, the lost worker given 5 s
RUN=(--worker_num=5 --local_worker_num=5 --ps_servers=2 --grace_period=5)

# lost_async MODE WHAT: an asynchronous run of ps_lost MODE and what each
# must show: exit 0, both survivors at the end, both servers saying
# worker 2 was lost
lost_async() {
    run_msrun "${RUN[@]}" --ps_staleness=1 "$PSL" "$1"
    cat "$TMP/out"
    expect_code 0 "$2"
    expect_not_in "FAIL" "$TMP/err" "$2"
    expect_in "ok lost" "$TMP/out" "$2"
    for w in 0 1; do
        expect_in "worker $w: 35 steps, 30 after worker 2 was lost" "$TMP/out" "$2"
    done
    local n
    n=$(grep -c "worker 2 lost without a goodbye" "$TMP/err")
    [ "$n" = 2 ] || fail "$2: $n servers said worker 2 was lost, want 2"
}

lost_async async async
expect_in "worker 2: 5 steps, vanishing" "$TMP/out" "async"
no_leftovers "async"
ok "async: two workers trained on after the third was lost"

# killsend: made by msr_ps_create, the victim ends inside a 16 MiB push to
# both servers while the others push: three runs (where the push stands
# at the end varies), the others go on in each
inside=0
for run in 1 2 3; do
    lost_async killsend "killsend $run"
    expect_in "worker 2: 5 steps, dying inside a push" "$TMP/out" "killsend $run"
    expect_in "wide rows: server 0's [56] pushes, server 1's [56]" "$TMP/out" "killsend $run"
    grep -q "worker 2: ended inside the push" "$TMP/out" && inside=$((inside + 1))
    no_leftovers "killsend $run"
done
[ "$inside" -ge 1 ] || fail "killsend: the victim ended inside its push in none of 3 runs"
ok "killsend: the victim ended inside its push in $inside of 3 runs; the others trained on"

run_msrun "${RUN[@]}" --max_restarts=1 "$PSL" sync
cat "$TMP/out"
expect_code 3 "sync"
expect_not_in "FAIL" "$TMP/err" "sync"
expect_not_in "ok lost" "$TMP/out" "sync"
# which rank sees the lost peer first and ends the generation varies:
# a server (serve failed) or a survivor (its step failed), each exit 3
expect_in "sync: .* failed: MSR_ERR_PEER_LOST" "$TMP/out" "sync"
expect_in "restart 1 of 1 after rank [0134] .* exited with code 3" "$TMP/err" "sync"
expect_in "job failed (generation 1): rank [0134] .* exited with code 3" "$TMP/err" "sync"
no_leftovers "sync"
ok "sync: a lost worker fails the job, restarted once"
exit "$FAILED"
