#!/bin/bash
# kill -9 of the (embedded) coordinator: msrun restarts it on its state file,
# the workers keep running, the job ends with the fault-free result. The job
# holds before its end until the kill is done (lib_fault.sh's gate).
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/fault/lib_fault.sh"
reference_digest >/dev/null
start_msrun --worker_num=4 --local_worker_num=4 --max_restarts=3 "$JOB" "$TMP/ck" "$ITERS" \
    "$EVERY" "$SLEEP_MS" "$TMP/result"
wait_started 4 "$TMP/out"
# a random point of the run, or the gate if the run got there first
d=$(rand_delay 0.1 1.0)
sleep "$d"
coord=$(children_named "$BG_PID" "^[^ ]*msrun coordinator ")
[ -n "$coord" ] || fail "no coordinator process under msrun ($BG_PID)"
kill -9 $coord || fail "the coordinator $coord was gone before the kill"
echo "killed the coordinator ($coord) after ${d}s"
release
wait_pid "$BG_PID" 90
expect_code 0 "the job after a killed coordinator"
expect_in "the embedded coordinator exited (SIGKILL); restarted it" "$TMP/err" "restarted"
expect_not_in "start gen 1" "$TMP/out" "the workers were not restarted"
expect_digest "$TMP/result"
no_leftovers "coordinator kill"
no_shm_leftovers "coordinator kill"
ok "kill -9 of the coordinator: resumed from its state file, workers untouched, same result"
