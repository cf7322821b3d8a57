#!/bin/bash
# Restarts run out: the job stops everywhere and the report names the last
# failure.
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/fault/lib_fault.sh"
start_msrun --worker_num=3 --local_worker_num=3 --max_restarts=1 --error_file="$TMP/e.json" \
    "$JOB" "$TMP/ck" 100000 "$EVERY" "$SLEEP_MS" "$TMP/result"
wait_started 3 "$TMP/out"
first=$(pick $(job_pids 0)) || fail "no worker pid published"
kill -9 "$first" || fail "worker $first was gone before the kill"
wait_count "start gen 1" "$TMP/out" 3 30 || fail "generation 1 running"
# a random point of generation 1 (its 100000 iterations outlast any delay)
sleep "$(rand_delay 0.1 0.5)"
victim=$(pick $(job_pids 1)) || fail "no worker pid of generation 1 published"
kill -KILL "$victim" || fail "worker $victim was gone before the kill"
wait_pid "$BG_PID" 90
expect_code 137 "restarts exhausted"
expect_in "job failed (generation 1): rank [0-9] on node 0 .*pid $victim) was killed by SIGKILL" \
    "$TMP/err" "the root cause names the last failure"
expect_in "restarts used: 1 of 1" "$TMP/err" "restart count"
python3 -c "import json,sys; e=json.load(open(sys.argv[1])); assert e['generation']==1 and e['signal']==9 and e['pid']==$victim, e" \
    "$TMP/e.json" || fail "error file"
no_leftovers "restarts exhausted"
no_shm_leftovers "restarts exhausted"
ok "restarts exhausted: the job fails cleanly with the right report"
