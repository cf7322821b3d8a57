#!/bin/bash
# Runs tests/ps/worker_ps.py (the Python binding, msrun.ps) under the real
# msrun with 3 ranks, the last a server, on /usr/bin/python3 with the
# package of the source tree and libmsrun of the build tree. Skipped (77)
# where tests/python's setup says so.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../integration/lib.sh"
# shellcheck disable=SC2034 # read by py_env.sh
SRC=${MSRUN_SOURCE:?MSRUN_SOURCE must point at the source directory}
. "$here/../python/py_env.sh"
py_setup array
CODE=0
timeout -k 5 60 env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --python "$PY" --worker_num=3 \
    --local_worker_num=3 --ps_servers=1 "$here/worker_ps.py" >"$TMP/out" 2>"$TMP/err" || CODE=$?
cat "$TMP/out"
expect_code 0 "worker_ps.py"
expect_not_in "FAIL" "$TMP/out" "worker_ps.py"
for r in 0 1 2; do expect_in "rank $r: ps ok" "$TMP/out" "worker_ps.py rank $r"; done
no_leftovers "worker_ps.py"
ok "msrun.ps: 2 workers and a server from Python"
exit "$FAILED"
