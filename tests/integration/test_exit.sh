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
ok "exit code propagated, root cause last, error file"

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
ok "exec failure reported"
no_leftovers "exit"
