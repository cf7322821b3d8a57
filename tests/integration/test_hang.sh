#!/bin/bash
# --worker_timeout: a stopped worker and a worker that stops reporting
# progress are killed as hung and named; programs without libmsrun are not
# judged.
. "$(dirname "$0")/lib.sh"

start_msrun --worker_num=3 --worker_timeout=1 --error_file="$TMP/e.json" "$WORKER" hang stop 1
wait_for "rank 1 ready" "$TMP/out" 30 || fail "rank 1 did not start"
# timed from rank 1's "ready" (not from msrun's start, which a loaded machine
# can make slow): rank 1 stops 5 beats (0.5 s) later and is hung 1 s
# (--worker_timeout) after that; the bound of 10 s leaves room for a loaded
# machine, and a timeout read as 10 s or a watch that looks every 10 s fails it
t0=$(date +%s.%N)
wait_pid "$BG_PID" 60
t1=$(date +%s.%N)
expect_code 137 "a stopped worker"
expect_in "rank 1 .* hung: no libmsrun beat for 1.0 s: killing it" "$TMP/err" "the agent says why"
expect_in "job failed (generation 0): rank 1 on node 0 .* hung: no libmsrun beat for 1.0 s and was killed" \
    "$TMP/err" "root cause"
python3 -c "import json,sys; e=json.load(open(sys.argv[1])); assert e['rank']==1 and e['reason'].startswith('hung'), e" \
    "$TMP/e.json" || fail "error file"
python3 -c "import sys; sys.exit(0 if $t1 - $t0 < 10 else 1)" || fail "found within seconds"
ok "SIGSTOP'd worker killed as hung (no beat) and reported"

# stopped before its beat thread could run: msr_init's own first beat makes
# it watched from the start
run_msrun --worker_num=3 --worker_timeout=1 "$WORKER" hang stop_at_init 0
expect_code 137 "a worker stopped right after msr_init"
expect_in "rank 0 .* hung: no libmsrun beat for 1.0 s: killing it" "$TMP/err" "found"
ok "a worker stopped right after msr_init is killed as hung"

run_msrun --worker_num=3 --worker_timeout=1 "$WORKER" hang stall 2
expect_code 137 "a stalled worker"
expect_in "rank 2 on node 0 .* hung: no msr_heartbeat() for 1.0 s and was killed" "$TMP/err" \
    "root cause"
ok "a worker that stops calling msr_heartbeat() is killed as hung"

# 2 s: four times --worker_timeout=0.5, so that a worker judged by it would
# be killed; a slow machine only makes the sleep longer, never shorter
cat >"$TMP/plain.sh" <<'SH'
#!/bin/sh
sleep 2
echo "plain worker done"
SH
chmod +x "$TMP/plain.sh"
run_msrun --worker_num=2 --worker_timeout=0.5 "$TMP/plain.sh"
expect_code 0 "programs without libmsrun"
[ "$(grep -c "plain worker done" "$TMP/out")" = 2 ] || fail "both finished"
[ "$(grep -c "only workers that link libmsrun are watched" "$TMP/err")" = 1 ] ||
    fail "msrun says once that programs without libmsrun are not watched: $(cat "$TMP/err")"
ok "programs without libmsrun are watched only for their exit, and msrun says so once"
no_leftovers "hang"
