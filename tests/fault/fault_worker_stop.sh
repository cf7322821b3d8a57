#!/bin/bash
# SIGSTOP of a worker (a hang): killed after --worker_timeout, the job
# restarts and ends with the fault-free result. The job holds before its end
# until the stop is done (lib_fault.sh's gate).
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/fault/lib_fault.sh"
reference_digest >/dev/null
start_msrun --worker_num=4 --local_worker_num=4 --max_restarts=3 --worker_timeout=1 "$JOB" \
    "$TMP/ck" "$ITERS" "$EVERY" "$SLEEP_MS" "$TMP/result"
wait_started 4 "$TMP/out"
# a random point of the run, or the gate if the run got there first
d=$(rand_delay 0.2 1.0)
sleep "$d"
victim=$(pick $(job_pids 0)) || fail "no worker pid published"
kill -STOP "$victim" || fail "worker $victim was gone before the stop"
echo "stopped worker $victim after ${d}s"
release
wait_pid "$BG_PID" 90
expect_code 0 "the job after a hung worker"
expect_in "hung: no libmsrun beat" "$TMP/err" "the hang was found"
expect_digest "$TMP/result"
no_leftovers "worker stop"
no_shm_leftovers "worker stop"
ok "SIGSTOP of a worker: killed as hung, restarted, same result"
