#!/bin/bash
# --worker_timeout: a stopped worker and a worker that stops reporting
# progress are killed as hung and named; programs without libmsrun are not
# judged.
. "$(dirname "$0")/lib.sh"

t0=$(date +%s.%N)
run_msrun --worker_num=3 --worker_timeout=1 --error_file="$TMP/e.json" "$WORKER" hang stop 1
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
