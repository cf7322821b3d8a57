#!/bin/bash
# Runs tests/ps/worker_ps_join.py (msrun.ps.join: a worker killed with
# SIGKILL, replaced alone and joined from Python) under the real msrun with
# 2 workers and a server at --ps_staleness=1 and --max_restarts=1, on
# /usr/bin/python3 with the package of the source tree and libmsrun of the
# build tree. Skipped (77) where tests/python's setup says so.
# MSR_TIMEOUT=20: a join that never pairs fails within the test's time.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../integration/lib.sh"
# shellcheck disable=SC2034 # read by py_env.sh
SRC=${MSRUN_SOURCE:?MSRUN_SOURCE must point at the source directory}
. "$here/../python/py_env.sh"
py_setup array
export MSR_TIMEOUT=20
CODE=0
timeout -k 5 60 env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --python "$PY" --worker_num=3 \
    --local_worker_num=3 --ps_servers=1 --ps_staleness=1 --max_restarts=1 --grace_period=5 \
    "$here/worker_ps_join.py" >"$TMP/out" 2>"$TMP/err" || CODE=$?
cat "$TMP/out"
expect_code 0 "worker_ps_join.py"
expect_not_in "FAIL" "$TMP/out" "worker_ps_join.py"
expect_in "worker 1: 3 steps, killing itself" "$TMP/out" "worker_ps_join.py"
expect_in "worker 1: incarnation 1 joined, pulled the current rows" "$TMP/out" "worker_ps_join.py"
for r in "0:" "1: incarnation 1" "2:"; do
    expect_in "rank $r ps join ok" "$TMP/out" "worker_ps_join.py rank ${r%%:*}"
done
expect_in "rank 1 (pid [0-9]*) was killed by SIGKILL: asynchronous parameter server worker, started again alone (MSR_INCARNATION=1; replacement 1 of 1 on this node)" \
    "$TMP/err" "worker_ps_join.py"
expect_in "worker 1's replacement joined (join 1)" "$TMP/err" "worker_ps_join.py"
expect_not_in "restart 1 of 1" "$TMP/err" "worker_ps_join.py"
no_leftovers "worker_ps_join.py"
ok "msrun.ps.join: a worker killed and replaced alone from Python, every push counted"
exit "$FAILED"
