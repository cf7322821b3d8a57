#!/usr/bin/env bash
# Runs a device-communicator test worker under the real msrun with NP ranks
# on this host and checks the outcome its mode expects. Cleans up every
# process of its job (found by the job id in their environment).
# Usage: run_gpu.sh WORKER MODE NP [LIMIT_SECONDS]   (MSRUN_BUILD: the build dir)
#   WORKER gpu_fake_worker: the fake GPU table, runs anywhere
#   WORKER gpu_worker: a real GPU; exits 77 (skipped) when this machine has
#          fewer than GPU_NEED (default 1) CUDA devices, after printing why
set -u
name=$1
mode=$2
np=$3
limit=${4:-120}
build=${MSRUN_BUILD:?MSRUN_BUILD is not set}
msrun=$build/bin/msrun
worker=$build/tests/$name
job=gputest-$mode-$$-$RANDOM
out=$(mktemp -d)
. "$(dirname "$0")/../shm_files.sh"

if [ "$name" = gpu_worker ]; then
    # A GPU test on a machine without one is skipped, not failed.
    probe=$(timeout 60 "$worker" probe "${GPU_NEED:-1}" 2>&1)
    rc=$?
    if [ $rc -ne 0 ]; then
        rm -rf "$out"
        [ $rc -eq 77 ] && echo "SKIP: $probe" && exit 77
        echo "FAIL: the GPU probe exited with $rc: $probe"
        exit 1
    fi
    echo "$probe"
fi

prog=("$worker" "$mode")
if [ -n "${MSRUN_SANITIZE:-}" ]; then
    # as tests/comm/run.sh: UCX must not hook malloc under AddressSanitizer
    export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_EVENTS=no
    worker_asan=${ASAN_OPTIONS:-detect_leaks=1}
    export ASAN_OPTIONS=detect_leaks=0
    prog=(env "ASAN_OPTIONS=$worker_asan" "$worker" "$mode")
fi

job_pids() {
    grep -lsa "MSR_JOB_ID=$job" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3
    pgrep -f -- "$job" 2>/dev/null
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

"$msrun" --worker_num="$np" --local_worker_num="$np" --job_id="$job" --grace_period=30 \
    "${prog[@]}" >"$out/log" 2>&1 &
pid=$!
end=$((SECONDS + limit))
while kill -0 $pid 2>/dev/null; do
    if [ "$SECONDS" -ge "$end" ]; then
        echo "run_gpu.sh: $name $mode with $np ranks still running after ${limit} s: killing it" \
            >>"$out/log"
        kill -TERM $pid 2>/dev/null
        sleep 2
        for p in $(job_pids); do kill -KILL "$p" 2>/dev/null; done
        break
    fi
    sleep 0.2
done
wait $pid
rc=$?

failed() {
    echo "FAIL: $*"
    echo "---- output ----"
    cat "$out/log"
    exit 1
}

case $mode in
kill | killstaged)
    [ $rc -eq 137 ] || failed "msrun exited with $rc, expected 137 (the victim's SIGKILL)"
    want=$((np - 1))
    got=$(grep -c "survived: MSR_ERR_PEER_LOST" "$out/log")
    [ "$got" -eq "$want" ] || failed "$got of $want survivors reported MSR_ERR_PEER_LOST"
    grep "survived" "$out/log"
    ;;
*)
    [ $rc -eq 0 ] || failed "msrun exited with $rc"
    grep -q "ok $mode" "$out/log" || failed "rank 0 did not report ok"
    grep -E "ok $mode|unique id|timed out|after" "$out/log"
    ;;
esac
echo "PASS: $name $mode with $np ranks"
