#!/bin/bash
# Exit statuses and the root-cause report.
. "$(dirname "$0")/lib.sh"

run_msrun --worker_num=4 --local_worker_num=4 "$WORKER" exit 0
expect_code 0 "all exit 0"
ok "all workers exit 0: msrun exits 0"

run_msrun --worker_num=4 --local_worker_num=4 --error_file="$TMP/err.json" "$WORKER" exit 3 2
expect_code 3 "rank 2 exits 3"
expect_in "job failed (generation 0): rank 2 on node 0 (127.0.0.1, pid [0-9]*) exited with code 3" \
    "$TMP/err" "root cause"
expect_in "| last words of rank 2" "$TMP/err" "stderr tail"
tail -n 1 "$TMP/err" | grep -q "| last words of rank 2" || fail "the root cause comes last"
python3 - "$TMP/err.json" <<'PY' || fail "error file"
import json, sys
e = json.load(open(sys.argv[1]))
assert e["rank"] == 2 and e["exit_code"] == 3 and e["signal"] == 0, e
assert e["node"] == 0 and e["generation"] == 0, e
assert e["stderr_tail"][-1] == "last words of rank 2", e
PY
[ "$(grep -c "exited with code 3" "$TMP/err")" = 1 ] ||
    fail "the failure is reported once, not $(grep -c "exited with code 3" "$TMP/err") times: $(cat "$TMP/err")"
ok "exit code propagated, root cause last (said once), error file"

# the job never formed: its own status, distinct from bad input and from a
# worker's, and given up on after cluster_time_out counted from the start
# (before: the first call's timeout, then the whole timeout again). With 10 s
# the right answer takes 10 s and the wrong one 20 s: the bound of 17 s leaves
# 7 s for a loaded machine to start and stop msrun (5.7 s seen at a load of
# 25 on 2 cores) and fails well before 20.
t0=$(date +%s.%N)
run_msrun --master_addr=127.0.0.1 --master_port="$(free_port)" --node_rank=1 --nnodes=2 \
    --local_worker_num=1 --token=not-used --cluster_time_out=10 "$WORKER" exit 0
t1=$(date +%s.%N)
expect_code 124 "the job never formed"
expect_in "no coordinator answered at 127.0.0.1:[0-9]* within 10 s" "$TMP/err" "why"
python3 -c "import sys; sys.exit(0 if $t1 - $t0 < 17 else 1)" ||
    fail "gave up after $(python3 -c "print(round($t1 - $t0, 1))") s, not 10"
ok "a job that never forms exits 124 after cluster_time_out"

run_msrun --worker_num=2 --local_worker_num=2 "$WORKER" exit SIGKILL 1
expect_code 137 "rank 1 killed"
expect_in "rank 1 on node 0 (127.0.0.1, pid [0-9]*) was killed by SIGKILL" "$TMP/err" "signal name"
ok "killed by a signal: 128 + signal number and its name"

run_msrun --worker_num=2 --local_worker_num=2 "$WORKER" exit SIGSEGV 0
expect_code 139 "rank 0 segfault"
expect_in "was killed by SIGSEGV" "$TMP/err" "SIGSEGV"
ok "segfault reported"

# an exec failure after the checks (a script without #!) is reported, exit 2
printf 'echo hi\n' >"$TMP/noshebang"
chmod +x "$TMP/noshebang"
run_msrun --worker_num=2 "$TMP/noshebang"
expect_code 2 "exec failure"
expect_in "cannot execute '$TMP/noshebang': Exec format error" "$TMP/err" "exec error reported"
# said once: before, the embedded coordinator also warned "node 0 ... left the
# job (rank 0: cannot execute ...)"
[ "$(grep -c "cannot execute" "$TMP/err")" = 1 ] ||
    fail "the exec failure is reported once, not $(grep -c "cannot execute" "$TMP/err") times: $(cat "$TMP/err")"
ok "exec failure reported once"

# two nodes, node 1's program cannot be executed: node 1 says why, and node
# 0 (the coordinator's) says it once, in its "job failed" report
port=$(free_port)
two=(--master_addr=127.0.0.1 --master_port="$port" --nnodes=2 --local_worker_num=1
    --cluster_time_out=30)
MSRUN_TOKEN=exit-test start_msrun "${two[@]}" --node_rank=0 "$WORKER" sleep 30
node0=$BG_PID
CODE=0
MSRUN_TOKEN=exit-test timeout -k 5 60 env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" "${two[@]}" \
    --node_rank=1 "$TMP/noshebang" >"$TMP/n1.out" 2>"$TMP/n1.err" || CODE=$?
expect_code 2 "node 1's exec failure"
wait_pid "$node0" 30
[ "$CODE" != 0 ] || fail "node 0 should fail with node 1"
[ "$(grep -c "cannot execute" "$TMP/n1.err")" = 1 ] ||
    fail "node 1 says it $(grep -c "cannot execute" "$TMP/n1.err") times, not once"
expect_in "job failed (generation 0): node 1 (127.0.0.1, pid [0-9]*) left the job (rank 1: cannot execute '$TMP/noshebang': Exec format error)" \
    "$TMP/err" "node 0 reports node 1's exec failure"
[ "$(grep -c "cannot execute" "$TMP/err")" = 1 ] ||
    fail "node 0 says it $(grep -c "cannot execute" "$TMP/err") times, not once"
ok "a remote node's exec failure: said once on each node"

# the stderr tail keeps the last 20 lines, in order, of a worker that wrote
# more than 20 (the ring of lines has turned over)
cat >"$TMP/many.sh" <<'SH'
#!/bin/sh
i=1
while [ $i -le 50 ]; do echo "numbered line $i" >&2; i=$((i + 1)); done
exit 5
SH
chmod +x "$TMP/many.sh"
run_msrun --worker_num=1 --error_file="$TMP/many.json" "$TMP/many.sh"
expect_code 5 "a worker with 50 stderr lines exits 5"
got=$(grep -o '| numbered line [0-9]*$' "$TMP/err" | sed 's/.* //' | paste -sd' ')
want=$(seq 31 50 | paste -sd' ')
[ "$got" = "$want" ] || fail "stderr tail: got lines '$got', want '$want'"
python3 - "$TMP/many.json" <<'PY' || fail "error file's stderr tail"
import json, sys
e = json.load(open(sys.argv[1]))
assert e["stderr_tail"] == ["numbered line %d" % i for i in range(31, 51)], e["stderr_tail"]
PY
ok "the last 20 of 50 stderr lines, in order, in the report and the error file"
no_leftovers "exit"
