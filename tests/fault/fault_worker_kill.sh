#!/bin/bash
# kill -9 of a worker mid-collective: the job restarts from its last complete
# checkpoint and ends with exactly the fault-free result. The job holds
# before its end until the kill is done (lib_fault.sh's gate).
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/fault/lib_fault.sh"
reference_digest >/dev/null
start_msrun --worker_num=4 --local_worker_num=4 --max_restarts=3 "$JOB" "$TMP/ck" "$ITERS" \
    "$EVERY" "$SLEEP_MS" "$TMP/result"
wait_started 4 "$TMP/out"
# a random point of the run, or the gate if the run got there first
d=$(rand_delay 0.2 1.0)
sleep "$d"
victim=$(pick $(job_pids 0)) || fail "no worker pid published"
kill -9 "$victim" || fail "worker $victim was gone before the kill"
echo "killed worker $victim after ${d}s"
release
wait_pid "$BG_PID" 90
expect_code 0 "the job after a killed worker"
expect_in "restart 1 of 3 after rank [0-9] on node 0 .* was killed by SIGKILL" "$TMP/err" "restart"
expect_in "start gen 1" "$TMP/out" "a new generation ran"
expect_digest "$TMP/result"
no_leftovers "worker kill"
no_shm_leftovers "worker kill"
ok "kill -9 of a worker: restarted, same result"
