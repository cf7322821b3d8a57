#!/usr/bin/env bash
# Runs tests/comm/bcast_worker MODE under the real msrun with NP ranks on
# this host and checks that it passed (rank 0 prints "ok MODE"). Cleans up
# every process of its job (found by the job id in their environment) and
# the shared-memory files they left, whatever happens. Mode late runs
# without a spin phase (MSR_COMM_SPIN_US=0) and also checks every rank's
# engine debug line: no idle round of a wait held the core, some yielded it.
# Usage: run_bcast.sh MODE NP [LIMIT_SECONDS]  (MSRUN_BUILD: the build dir)
set -u
mode=$1
np=$2
limit=${3:-60}
build=${MSRUN_BUILD:?MSRUN_BUILD is not set}
job=bcasttest-$mode-$$-$RANDOM
out=$(mktemp -d)
. "$(dirname "$0")/../shm_files.sh"

job_pids() {
    grep -lsa "MSR_JOB_ID=$job" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3
}

cleanup() {
    local p f
    for p in $(job_pids); do
        [ "$p" != "$$" ] && kill -KILL "$p" 2>/dev/null
    done
    for f in $(stale_shm); do rm -f "/dev/shm/$f"; done
    rm -rf "$out"
}
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { cleanup; }' EXIT

# late: waits without a spin phase, and the engines' debug lines to count
# their idle rounds
env=()
[ "$mode" = late ] && env=(MSR_COMM_SPIN_US=0 MSR_LOG_LEVEL=debug)
env "${env[@]}" "$build/bin/msrun" --worker_num="$np" --local_worker_num="$np" --job_id="$job" --grace_period=30 \
    "$build/tests/bcast_worker" "$mode" >"$out/log" 2>&1 &
pid=$!
end=$((SECONDS + limit))
while kill -0 "$pid" 2>/dev/null; do
    if [ "$SECONDS" -ge "$end" ]; then
        echo "run_bcast.sh: $mode with $np ranks still running after $limit s: killing it" >>"$out/log"
        kill -TERM "$pid" 2>/dev/null
        break
    fi
    sleep 0.2
done
wait "$pid"
rc=$?
if [ $rc -ne 0 ] || ! grep -q "ok $mode" "$out/log"; then
    echo "FAIL: $mode with $np ranks (msrun exited with $rc)"
    echo "---- output ----"
    cat "$out/log"
    exit 1
fi
if [ "$mode" = late ]; then
    # every rank's engine: no idle round held the core, some yielded it
    lines=$(grep -c "engine .*: [0-9]* waits, 0 idle rounds held the core, [1-9][0-9]* yielded it" \
        "$out/log")
    if [ "$lines" -ne "$np" ]; then
        echo "FAIL: late with $np ranks: $lines of $np engines yielded in every idle round"
        echo "---- engine lines ----"
        grep "engine .* waits" "$out/log"
        exit 1
    fi
fi
echo "PASS: $mode with $np ranks"
