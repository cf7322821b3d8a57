#!/bin/bash
# Recovery times at msrun's default settings, median of RUNS (default 10):
#  - worker: from kill -9 of a worker until every worker of the next
#    generation is running (has joined, built its communicator and loaded the
#    checkpoint: the job's "start gen" line carries the time);
#  - node: from kill -9 of an agent of an elastic job (--nnodes 2:3, one
#    worker per node) until the job has re-formed and both remaining workers
#    run the next generation.
#   scripts/bench-recovery.sh [RUNS] [BUILD]
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
build=${2:-build}
M=$build/bin/msrun
J=$build/tests/fault_job
[ -x "$J" ] || { echo "build first" >&2; exit 2; }
tmp=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { pkill -9 -f "$tmp" 2>/dev/null; rm -rf "$tmp"; }' EXIT
# the job token every msrun of a multi-node job shares (there is no default)
(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$tmp/token")
export MSRUN_TOKEN_FILE=$tmp/token
. scripts/bench_lib.sh

for ((i = 0; i < runs; i++)); do
    rm -rf "$tmp"/w && mkdir -p "$tmp/w"
    $M --worker_num=4 --local_worker_num=4 --max_restarts=1 --log_level=warn \
        "$J" "$tmp/w/ck" 100000 10 4 "$tmp/w/res" >"$tmp/w/out" 2>/dev/null &
    pid=$!
    for _ in $(seq 200); do [ "$(grep -c 'start gen 0' "$tmp/w/out")" = 4 ] && break; sleep 0.05; done
    sleep 0.5
    victim=$(pgrep -P "$pid" -f fault_job | head -n 1)
    t0=$(now)
    kill -9 "$victim"
    for _ in $(seq 200); do [ "$(grep -c 'start gen 1' "$tmp/w/out")" = 4 ] && break; sleep 0.05; done
    recovered 1 4 "$t0" "$tmp/w/out" >>"$tmp/worker"
    kill -INT "$pid"; wait "$pid" 2>/dev/null
done

for ((i = 0; i < runs; i++)); do
    rm -rf "$tmp"/n && mkdir -p "$tmp/n"
    port=$(free_port)
    common=(--master_addr=127.0.0.1 --master_port="$port" --nnodes=2:3 --local_worker_num=1
        --max_restarts=1 --log_level=warn)
    pids=()
    for n in 0 1 2; do
        $M "${common[@]}" "$J" "$tmp/n/ck" 100000 10 4 "$tmp/n/res" >"$tmp/n/o$n" 2>/dev/null &
        pids+=($!)
        [ $n = 0 ] && sleep 0.3
    done
    for _ in $(seq 300); do [ "$(cat "$tmp"/n/o* | grep -c 'start gen 0')" = 3 ] && break; sleep 0.05; done
    sleep 0.5
    t0=$(now)
    kill -9 "${pids[2]}"
    for _ in $(seq 300); do [ "$(cat "$tmp"/n/o0 "$tmp"/n/o1 | grep -c 'start gen 1')" = 2 ] && break; sleep 0.05; done
    recovered 1 2 "$t0" "$tmp"/n/o0 "$tmp"/n/o1 >>"$tmp/node"
    kill -INT "${pids[0]}" "${pids[1]}"; { wait "${pids[@]}"; } 2>/dev/null
done
printf "recovery at default settings, %d runs each (seconds)\n" "$runs"
printf "%-34s %8s %8s %8s\n" fault median best worst
for k in worker node; do
    label=$([ $k = worker ] && echo "worker kill -9 -> next generation" || echo "agent kill -9 -> job re-formed")
    printf "%-34s %8s %8s %8s\n" "$label" "$(median <"$tmp/$k")" "$(sort -g "$tmp/$k" | head -n1)" "$(sort -g "$tmp/$k" | tail -n1)"
done
