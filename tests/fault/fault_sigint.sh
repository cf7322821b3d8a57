#!/bin/bash
# SIGINT to msrun: everything stops within the grace period. "Within" is
# msrun's own word: it sends SIGKILL and says so when the grace ran out
# ("did not stop within"), so the test reads that instead of timing msrun
# with a bound of its own (the time is printed, not judged).
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/fault/lib_fault.sh"
start_msrun --worker_num=4 --local_worker_num=4 --grace_period=2 "$JOB" "$TMP/ck" 100000 \
    "$EVERY" "$SLEEP_MS" "$TMP/result"
wait_started 4 "$TMP/out"
# a random point of the job (its 100000 iterations outlast any delay)
sleep "$(rand_delay 0.1 0.8)"
t0=$(date +%s.%N)
kill -INT "$BG_PID"
wait_pid "$BG_PID" 90
t1=$(date +%s.%N)
expect_code 130 "SIGINT"
expect_in "interrupted by SIGINT: stopping the workers" "$TMP/err" "msrun took the signal"
expect_not_in "did not stop within" "$TMP/err" "the workers stopped within the grace"
no_leftovers "SIGINT"
no_shm_leftovers "SIGINT"
ok "SIGINT: everything stopped within the grace period ($(python3 -c "print('%.2f' % ($t1 - $t0))") s)"
