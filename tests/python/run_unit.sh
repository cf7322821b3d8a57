#!/usr/bin/env bash
# The Python package without msrun (tests/python/test_unit.py): where it
# loads libmsrun from, and a job of one rank in one process.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../integration/lib.sh"
# shellcheck disable=SC2034 # read by py_env.sh
SRC=${MSRUN_SOURCE:?MSRUN_SOURCE must point at the source directory}
. "$here/py_env.sh"
py_setup numpy
CODE=0 # read by lib.sh's expect_code
# no job around: the singleton job, whatever the caller's environment
timeout -k 5 50 env -u MSR_AGENT -u MSR_COORDINATOR -u MSR_RANK -u MSR_WORLD_SIZE \
    MSRUN_TEST_MARKER="$MARKER" "$PY" "$here/test_unit.py" >"$TMP/out" 2>"$TMP/err" || CODE=$?
cat "$TMP/out"
expect_code 0 "test_unit.py"
expect_in "^unit ok" "$TMP/out" "test_unit.py"
no_leftovers "test_unit.py"
exit "$FAILED"
