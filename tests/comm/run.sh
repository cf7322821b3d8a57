#!/usr/bin/env bash
# Runs tests/comm/comm_worker MODE under the real msrun with NP ranks on this
# host and checks the outcome the mode expects. Cleans up every process of
# its job (found by the job id in their environment) whatever happens.
# Usage: run.sh MODE NP [LIMIT_SECONDS [NODES]]  (MSRUN_BUILD: the build dir)
# NODES > 1 starts that many msrun processes on loopback, each with NP/NODES
# workers: a multi-node job on one host (its groups share one segment and
# endpoints between "nodes" use shared memory, or with MSR_COMM_HOST_SHM=0
# UCX's network path and its peer-failure handling, as between machines).
set -u
mode=$1
np=$2
limit=${3:-150}
nodes=${4:-1}
build=${MSRUN_BUILD:?MSRUN_BUILD is not set}
msrun=$build/bin/msrun
worker=$build/tests/comm_worker
job=commtest-$mode-$$-$RANDOM
out=$(mktemp -d)
. "$(dirname "$0")/../shm_files.sh"
# the job's token, for every msrun of a multi-node job (there is no default)
(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$out/token")
export MSRUN_TOKEN_FILE=$out/token

# Under AddressSanitizer UCX must not hook malloc/mmap (it would fight ASan
# over the same symbols). Leaks are checked in the workers (this module's
# code); msrun itself is the launcher's business and runs without it.
prog=("$worker" "$mode")
if [ -n "${MSRUN_SANITIZE:-}" ]; then
    export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_EVENTS=no
    worker_asan=${ASAN_OPTIONS:-detect_leaks=1}
    export ASAN_OPTIONS=detect_leaks=0
    prog=(env "ASAN_OPTIONS=$worker_asan" "$worker" "$mode")
    # a connection to the member that left may fail inside UCX, whose error
    # path leaks (see ucx_leave.supp)
    case $mode in leave | exitafterbarrier) export LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")" && pwd)/ucx_leave.supp" ;; esac
fi

job_pids() {
    grep -lsa "MSR_JOB_ID=$job" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3
    pgrep -f -- "$job" 2>/dev/null
}

cleanup() {
    local p
    for p in $(job_pids); do
        [ "$p" != "$$" ] && kill -KILL "$p" 2>/dev/null
    done
    # Shared-memory files our processes left (UCX unlinks its own at once;
    # this only catches leftovers that no live process maps).
    local f
    for f in $(stale_shm); do rm -f "/dev/shm/$f"; done
    rm -rf "$out"
}
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { cleanup; }' EXIT

# a free port claimed for this script until it exits, with the next one
# (msrun's master_port + 1, its workers' MASTER_PORT) claimed beside it
# (lib.sh's free_port)
free_port() {
    local pair
    pair=$(MSRUN_PORT_CLAIMS="$build/tests/port-claims" MSRUN_PORT_OWNER=$$ \
        python3 "$(dirname "$0")/../../scripts/free_port.py" --consecutive 2) || return 1
    echo "${pair%%$'\n'*}"
}

run_once() { # $1: log file; the exit status of node 0's msrun
    local pids=() n
    if [ "$nodes" -le 1 ]; then
        "$msrun" --worker_num="$np" --local_worker_num="$np" --job_id="$job" --grace_period=30 \
            "${prog[@]}" >"$1" 2>&1 &
        pids=($!)
    else
        local port
        port=$(free_port)
        for ((n = nodes - 1; n >= 0; n--)); do
            "$msrun" --worker_num="$np" --local_worker_num=$((np / nodes)) --job_id="$job" \
                --master_addr=127.0.0.1 --master_port="$port" --node_rank=$n --grace_period=30 \
                "${prog[@]}" >"$1.node$n" 2>&1 &
            pids=($! "${pids[@]}")
        done
    fi
    local end=$((SECONDS + limit)) alive
    while :; do
        alive=0
        for n in "${pids[@]}"; do kill -0 "$n" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        if [ "$SECONDS" -ge "$end" ]; then
            echo "run.sh: $mode with $np ranks still running after ${limit} s: killing it" >>"$1"
            kill -TERM "${pids[@]}" 2>/dev/null
            sleep 2
            for p in $(job_pids); do kill -KILL "$p" 2>/dev/null; done
            break
        fi
        sleep 0.2
    done
    local rc=0 code
    for ((n = ${#pids[@]} - 1; n >= 0; n--)); do
        code=0
        wait "${pids[$n]}" || code=$?
        [ "$n" = 0 ] && rc=$code
    done
    [ "$nodes" -gt 1 ] && cat "$1".node* >"$1"
    return $rc
}

failed() {
    echo "FAIL: $*"
    echo "---- output ----"
    cat "$out"/log* 2>/dev/null
    exit 1
}

case $mode in
collectives | samecomm | inflight | inflighthier | p2p | anysrc | threads | leave | hier | small | giveup)
    run_once "$out/log"
    rc=$?
    [ $rc -eq 0 ] || failed "msrun exited with $rc"
    grep -q "ok $mode" "$out/log" || failed "rank 0 did not report ok"
    # every message left unreceived is dropped when an engine closes: UCX
    # warns of none ("unexpected tag-receive descriptor ... was not matched")
    ! grep -q "was not matched" "$out/log" || failed "UCX warned of an unmatched message"
    ;;
unreceived)
    # debug: the engines' count of the messages they drain at their close
    MSR_LOG_LEVEL=debug run_once "$out/log"
    rc=$?
    [ $rc -eq 0 ] || failed "msrun exited with $rc"
    grep -q "ok $mode" "$out/log" || failed "rank 0 did not report ok"
    grep -q '^\[node 0 rank 0\] .*notices drained at its close (and 2 messages' "$out/log" ||
        failed "rank 0's engine did not drop the two messages it never received"
    ! grep -q "was not matched" "$out/log" || failed "UCX warned of an unmatched message"
    ;;
exitafterbarrier)
    run_once "$out/log"
    rc=$?
    [ $rc -eq 0 ] || failed "msrun exited with $rc"
    got=$(grep -c "ok exitafterbarrier" "$out/log")
    [ "$got" -eq $((np - 1)) ] || failed "$got of $((np - 1)) survivors saw the barrier end"
    ;;
determinism)
    run_once "$out/log1"
    rc=$?
    [ $rc -eq 0 ] || failed "first run: msrun exited with $rc"
    job=$job-2
    run_once "$out/log2"
    rc=$?
    [ $rc -eq 0 ] || failed "second run: msrun exited with $rc"
    h1=$(grep -o 'determinism hash [0-9a-f]*' "$out/log1")
    h2=$(grep -o 'determinism hash [0-9a-f]*' "$out/log2")
    [ -n "$h1" ] || failed "no hash printed"
    [ "$h1" = "$h2" ] || failed "runs differ: '$h1' and '$h2'"
    echo "$h1 in both runs"
    ;;
kill | killring | killhier | killhierrs | killhierag | killhierbc | killhierred | killsmall | stop | \
    stopsmall | killsmallbc | killsmallbcauto | killsmallag | killsmallrs | killanysrc | killlined | \
    stoplined)
    run_once "$out/log"
    rc=$?
    [ $rc -eq 137 ] || failed "msrun exited with $rc, expected 137 (the victim's SIGKILL)"
    want=$((np - 1))
    if [ "$mode" != stop ] && [ "$mode" != stopsmall ] && [ "$mode" != stoplined ]; then
        got=$(grep -c "survived: MSR_ERR_PEER_LOST" "$out/log")
    else
        got=$(grep -cE "survived: MSR_ERR_(TIMEOUT|PEER_LOST)" "$out/log")
    fi
    [ "$got" -eq "$want" ] || failed "$got of $want survivors reported the failure"
    grep "survived" "$out/log"
    ;;
*)
    echo "run.sh: unknown mode $mode" >&2
    exit 2
    ;;
esac
echo "PASS: $mode with $np ranks"
