#!/usr/bin/env bash
# Runs tests/parallel/dp_worker on NP workers under the real msrun and
# checks that every rank passed (see dp_worker.c for what is checked).
# Cleans up every process of its job whatever happens.
# Usage: dp_check.sh NP [LIMIT_SECONDS]    (MSRUN_BUILD: the build directory)
set -u
np=$1
limit=${2:-120}
build=${MSRUN_BUILD:?MSRUN_BUILD is not set}
job=dptest-$np-$$-$RANDOM
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
    --job_id="$job" "${worker_env[@]}" "$build/tests/dp_worker" "$work/ckpt" >"$work/log" 2>&1 ||
    rc=$?
cat "$work/log"
if [[ $rc -ne 0 ]]; then
    echo "FAIL: dp_worker on $np workers exited $rc"
    exit 1
fi
grep -q "dp_worker: dp $np: all checks passed" "$work/log" || {
    echo "FAIL: dp_worker on $np workers did not report success"
    exit 1
}
echo "dp_check $np: ok"
