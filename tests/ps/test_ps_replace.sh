#!/bin/bash
# A killed worker replaced alone (tests/ps/ps_replace.c), 3 workers and 2
# servers at --ps_staleness=1. replace: worker 2 dies by SIGKILL; the two
# others go on while it is dead; its msrun starts it again alone
# (MSR_INCARNATION=1, no restart of the job), it joins the servers, pulls
# the current rows, holds the others at its clock + 1 and pushes; every row
# counts exactly the acknowledged pushes; the job ends with 0. die: worker
# 2 dies in every incarnation: replaced once (--max_restarts=1), then its
# failure is reported and the job restarted, then it fails with SIGKILL's
# status. Synchronous mode keeps restarting the whole job: ps_lost.
# MSR_TIMEOUT=20: a join that never pairs fails within the test's time.
. "$(dirname "$0")/../integration/lib.sh"
PSR=$BUILD/tests/ps_replace
export MSR_TIMEOUT=20

run_msrun --worker_num=5 --local_worker_num=5 --ps_servers=2 --ps_staleness=1 \
    --max_restarts=1 --grace_period=5 "$PSR" replace
cat "$TMP/out"
expect_code 0 "replace"
expect_not_in "FAIL" "$TMP/err" "replace"
expect_in "ok replace" "$TMP/out" "replace"
expect_in "worker 2: 5 steps, killing itself" "$TMP/out" "replace"
expect_in "worker 2: incarnation 1 joined, pulled the current rows" "$TMP/out" "replace"
expect_in "worker 2: incarnation 1 pushed 6 steps" "$TMP/out" "replace"
for w in 0 1; do
    expect_in "worker $w: 19 steps, 10 while worker 2 was dead, 4 after its replacement" \
        "$TMP/out" "replace"
done
expect_in "rank 2 (pid [0-9]*) was killed by SIGKILL: asynchronous parameter server worker, started again alone (MSR_INCARNATION=1; replacement 1 of 1 on this node)" \
    "$TMP/err" "replace"
n=$(grep -c "worker 2's replacement joined (join 1)" "$TMP/err")
[ "$n" = 2 ] || fail "replace: $n servers took worker 2's replacement, want 2"
expect_not_in "restart 1 of 1" "$TMP/err" "replace"
no_leftovers "replace"
ok "replace: worker 2 replaced alone, joined the servers, every push counted"

run_msrun --worker_num=5 --local_worker_num=5 --ps_servers=2 --ps_staleness=1 \
    --max_restarts=1 --grace_period=5 "$PSR" die
cat "$TMP/out"
expect_code 137 "die"
expect_not_in "FAIL" "$TMP/err" "die"
expect_in "worker 2: incarnation 0 joined, killing itself" "$TMP/out" "die"
expect_in "worker 2: incarnation 1 joined, killing itself" "$TMP/out" "die"
expect_in "restart 1 of 1 after rank 2 .* SIGKILL" "$TMP/err" "die"
expect_in "started again alone (MSR_INCARNATION=1; replacement 1 of 1 on this node)" \
    "$TMP/err" "die"
expect_in "rank 2 (pid [0-9]*) was killed by SIGKILL: not replaced, this node's 1 replacement of --max_restarts=1 spent; reporting the failure" \
    "$TMP/err" "die"
expect_in "job failed (generation 1): rank 2 .* SIGKILL" "$TMP/err" "die"
n=$(grep -c "worker 2's replacement joined (join 1)" "$TMP/err")
[ "$n" = 2 ] || fail "die: $n servers took worker 2's replacement, want 2"
no_leftovers "die"
ok "die: one replacement, then the failure reported and the job ended"
exit "$FAILED"
