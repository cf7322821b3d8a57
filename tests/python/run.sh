#!/usr/bin/env bash
# Runs a test program of the Python package (tests/python/*.py) under the
# real msrun with NP workers on /usr/bin/python3, the package from the
# source tree and libmsrun from the build tree, then checks that msrun
# exited 0 and every rank printed "rank R of NP: WHAT ok". Exits 77
# (skipped) with the reason when the program's imports are missing, or when
# a sanitizer build's libmsrun cannot be loaded into Python. Processes of the
# job are killed on exit, whatever happens.
# Usage: run.sh PROGRAM.py NP WHAT [LIMIT_SECONDS [NODES]]
# NODES > 1 starts that many msrun processes on loopback, NP/NODES workers
# each: a job of several nodes on one host.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../integration/lib.sh"
# shellcheck disable=SC2034 # read by py_env.sh
SRC=${MSRUN_SOURCE:?MSRUN_SOURCE must point at the source directory}
prog=$here/$1
np=$2
what=$3
limit=${4:-120}
nodes=${5:-1}
needs=numpy
[ "$what" = torch ] && needs="numpy, torch, torch.distributed"
. "$here/py_env.sh"
py_setup "$needs"

CODE=0
if [ "$nodes" -le 1 ]; then
    timeout -k 5 "$limit" env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --python "$PY" \
        --worker_num="$np" --local_worker_num="$np" "$prog" >"$TMP/out" 2>"$TMP/err" || CODE=$?
else
    use_token_file
    port=$(free_port)
    pids=()
    for ((n = nodes - 1; n >= 0; n--)); do
        env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --python "$PY" --worker_num="$np" \
            --local_worker_num=$((np / nodes)) --master_addr=127.0.0.1 --master_port="$port" \
            --node_rank=$n "$prog" >"$TMP/n$n.out" 2>"$TMP/n$n.err" &
        pids[n]=$!
    done
    for ((n = 0; n < nodes; n++)); do
        wait_pid "${pids[n]}" "$limit"
        [ "$CODE" = 0 ] || break
    done
    cat "$TMP"/n*.out >"$TMP/out"
fi
if [ "$CODE" = 77 ] && grep -q "SKIP:" "$TMP/out"; then
    grep -m 1 "SKIP:" "$TMP/out"
    exit 77
fi
expect_code 0 "$1 with $np ranks"
for ((r = 0; r < np; r++)); do
    expect_in "rank $r of $np: $what ok" "$TMP/out" "$1 with $np ranks"
done
no_leftovers "$1 with $np ranks"
ok "$1: $np ranks on $nodes msrun node(s), every rank's checks passed"
exit "$FAILED"
