#!/bin/bash
# Coordinator failover through etcd, median of RUNS (default 5):
#  - failover: an elastic job (--nnodes 2:3, one worker per node,
#    --rdzv_backend=etcd --etcd_lease 1); kill -9 of the msrun that runs the
#    coordinator and of its coordinator, until both remaining workers run
#    the next generation (another node elected, its coordinator resumed from
#    etcd, the nodes reconnected, the lost node dropped);
#  - beside it, the same job without etcd losing a node that does not run
#    the coordinator (bench-recovery.sh's "agent kill -9" with the state
#    file), at the same --node_timeout 1 --heartbeat_interval 0.3;
#  - launch: a one-node job of `true` with --rdzv_backend=etcd against the
#    same without it (--master_addr 127.0.0.1), from start to exit.
# Needs etcd (Debian's etcd-server).
#   scripts/bench-failover.sh [RUNS] [BUILD]
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
build=${2:-build}
M=$build/bin/msrun
J=$build/tests/fault_job
[ -x "$J" ] || { echo "build first" >&2; exit 2; }
command -v etcd >/dev/null || { echo "no etcd (Debian: apt-get install etcd-server)" >&2; exit 2; }
tmp=$(mktemp -d)
epids=()
trap 'kill -9 "${epids[@]}" 2>/dev/null; pkill -9 -f "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$tmp/token")
export MSRUN_TOKEN_FILE=$tmp/token
. scripts/bench_lib.sh

cport=$(free_port)
pport=$(free_port)
ep=127.0.0.1:$cport
etcd --name b --data-dir "$tmp/etcd-data" --listen-client-urls "http://$ep" \
    --advertise-client-urls "http://$ep" --listen-peer-urls "http://127.0.0.1:$pport" \
    --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "b=http://127.0.0.1:$pport" --heartbeat-interval 50 \
    --election-timeout 500 >"$tmp/etcd.log" 2>&1 &
epids+=($!)
for _ in $(seq 100); do
    ETCDCTL_API=3 etcdctl --endpoints "$ep" endpoint health >/dev/null 2>&1 && break
    sleep 0.1
done

fast=(--nnodes=2:3 --local_worker_num=1 --max_restarts=1 --log_level=warn --node_timeout=1
    --heartbeat_interval=0.3)
# one elastic job of 3 nodes (mode etcd|static), kill the node given by
# victim(), time until gen 1 runs on the 2 left
job() {
    local mode=$1 i=$2 d="$tmp/$1$2" n pids=() port
    mkdir -p "$d"
    port=$(free_port)
    for n in 0 1 2; do
        if [ "$mode" = etcd ]; then
            $M "${fast[@]}" --rdzv_backend=etcd --rdzv_endpoint="$ep" --rdzv_id="b$i" \
                --etcd_lease=1 "$J" "$d/ck" 100000 10 4 "$d/res" >"$d/o$n" 2>/dev/null &
        else
            $M "${fast[@]}" --master_addr=127.0.0.1 --master_port="$port" \
                "$J" "$d/ck" 100000 10 4 "$d/res" >"$d/o$n" 2>/dev/null &
        fi
        pids+=($!)
        [ $n = 0 ] && sleep 0.3
    done
    for _ in $(seq 300); do [ "$(cat "$d"/o* | grep -c 'start gen 0')" = 3 ] && break; sleep 0.05; done
    sleep 0.5
    local victim=2 coord=
    if [ "$mode" = etcd ]; then
        coord=$(pgrep -f "msrun coordinator .*--etcd_prefix /msrun/b$i " | head -1)
        local agent
        agent=$(ps -o ppid= -p "$coord" | tr -d ' ')
        for n in 0 1 2; do [ "${pids[$n]}" = "$agent" ] && victim=$n; done
    fi
    t0=$(now)
    kill -9 "${pids[$victim]}" $coord
    local left=()
    for n in 0 1 2; do [ $n != "$victim" ] && left+=("$d/o$n"); done
    for _ in $(seq 300); do [ "$(cat "${left[@]}" | grep -c 'start gen 1')" = 2 ] && break; sleep 0.05; done
    recovered 1 2 "$t0" "${left[@]}" >>"$tmp/$mode"
    for n in 0 1 2; do [ $n != "$victim" ] && kill -INT "${pids[$n]}"; done
    { wait "${pids[@]}"; } 2>/dev/null
}
for ((i = 0; i < runs; i++)); do
    job etcd "$i"
    job static "$i"
done
launch() {
    local s e
    s=$(now)
    "$M" "$@" --nnodes=1 --local_worker_num=1 --log_level=warn true >/dev/null 2>&1
    e=$(now)
    echo "$s $e" | awk '{printf "%.4f\n", $2 - $1}'
}
for ((i = 0; i < runs * 2; i++)); do
    launch --master_addr=127.0.0.1 --master_port="$(free_port)" >>"$tmp/l_static"
    launch --rdzv_backend=etcd --rdzv_endpoint="$ep" --rdzv_id="l$i" --etcd_lease=1 >>"$tmp/l_etcd"
done
printf "failover and launch, %d runs each (seconds)\n" "$runs"
printf "%-52s %8s %8s %8s\n" what median best worst
row() { printf "%-52s %8s %8s %8s\n" "$1" "$(median <"$2")" "$(sort -g "$2" | head -n1)" "$(sort -g "$2" | tail -n1)"; }
row "etcd: coordinator's node kill -9 -> job re-formed" "$tmp/etcd"
row "state file: other node kill -9 -> job re-formed" "$tmp/static"
row "launch, one node, --rdzv_backend=etcd" "$tmp/l_etcd"
row "launch, one node, --master_addr (no etcd)" "$tmp/l_static"
