#!/usr/bin/env bash
# Runs tests/parallel/mp_worker on NP workers under the real msrun and
# checks that every rank passed (see mp_worker.c for what is checked).
# Cleans up every process of its job whatever happens.
# Usage: mp_check.sh NP LIMIT_SECONDS LAYOUT...    (MSRUN_BUILD: the build directory)
set -u
np=$1
limit=$2
shift 2
build=${MSRUN_BUILD:?MSRUN_BUILD is not set}
job=mptest-$np-$$-$RANDOM
work=$(mktemp -d)
source "$(dirname "$0")/job_env.sh"

cleanup() {
    kill_job "$job"
    rm -rf "$work"
}
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { cleanup; }' EXIT

rc=0
timeout -k 5 "$limit" "${msrun_cmd[@]}" --worker_num="$np" --local_worker_num="$np" \
    --job_id="$job" "${worker_env[@]}" "$build/tests/mp_worker" "$@" >"$work/log" 2>&1 ||
    rc=$?
cat "$work/log"
if [[ $rc -ne 0 ]]; then
    echo "FAIL: mp_worker on $np workers exited $rc"
    exit 1
fi
grep -q "mp_worker: $# layouts: all checks passed" "$work/log" || {
    echo "FAIL: mp_worker on $np workers did not report success"
    exit 1
}
echo "mp_check $np: ok"
