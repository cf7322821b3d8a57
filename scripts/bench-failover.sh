#!/bin/bash
# Coordinator failover through etcd beside today's recovery without etcd,
# median of RUNS (default 5), on an elastic job (--nnodes 2:3, one worker
# per node, --node_timeout 1 --heartbeat_interval 0.3):
#  - etcd: kill -9 of the msrun that runs the coordinator and of its
#    coordinator (--rdzv_backend=etcd --etcd_lease 1), until both remaining
#    workers run the next generation (another node elected, its coordinator
#    resumed from etcd, the nodes reconnected, the lost node dropped); and
#    its steps, each timed from the kill: the leader key's loss seen (its
#    lease expired), the election won, the new coordinator listening, both
#    nodes left following it, the lost node declared lost, the job running
#    again;
#  - state file, coordinator: kill -9 of the embedded coordinator (no etcd,
#    --master_addr), which its msrun restarts on its state file, until every
#    node's calls are answered again (the workers run on throughout: the
#    job runs again once its nodes reach the coordinator);
#  - state file, node loss: kill -9 of the msrun of a node that does not run
#    the coordinator, until the 2 workers left run the next generation (an
#    ordinary node's loss, as bench-recovery.sh's "agent kill -9");
#  - launch: a one-node job of `true` with --rdzv_backend=etcd against the
#    same without it (--master_addr 127.0.0.1), from start to exit.
# msrun's own lines carry no time: each line of its stderr is stamped when
# this script reads it (bash's EPOCHREALTIME), on the clock the kill is
# timed by. Needs etcd (Debian's etcd-server).
#   scripts/bench-failover.sh [RUNS] [BUILD]     (RUNS 1: a quick smoke run)
set -uo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
runs=${1:-5}
build=${2:-build}
M=$build/bin/msrun
J=$build/tests/fault_job
[ -x "$J" ] || { echo "build first" >&2; exit 2; }
command -v etcd >/dev/null || { echo "no etcd (Debian: apt-get install etcd-server)" >&2; exit 2; }
tmp=$(mktemp -d)
epids=()
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { kill -9 "${epids[@]}" 2>/dev/null; pkill -9 -f "$tmp" 2>/dev/null; rm -rf "$tmp"; }' EXIT
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

# stamp: each line of stdin with the time it is read, "SECONDS LINE"
stamp() {
    local l
    while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done
}
# first T0 TEXT FILES...: seconds from T0 to the first line of stamped FILES
# at or after T0 that holds TEXT (nothing if none)
first() {
    local t0=$1 text=$2
    shift 2
    awk -v t0="$t0" -v text="$text" '$1 >= t0 && index($0, text) { print $1 - t0 }' "$@" |
        sort -g | head -n 1
}
# all T0 TEXT FILES...: when TEXT has appeared in every one of FILES (the
# latest of their first lines), nothing unless in all
all() {
    local t0=$1 text=$2 f t worst=
    shift 2
    for f in "$@"; do
        t=$(first "$t0" "$text" "$f")
        [ -n "$t" ] || return 0
        worst=$(printf '%s\n%s\n' "$t" "$worst" | sort -g | tail -n 1)
    done
    printf '%.3f\n' "$worst"
}
# put NAME VALUE: one measurement of NAME (none when VALUE is empty)
put() {
    if [ -n "$2" ]; then printf '%.3f\n' "$2" >>"$tmp/r.$1"; else : >>"$tmp/r.$1"; fi
}

fast=(--nnodes=2:3 --local_worker_num=1 --max_restarts=1 --log_level=info --node_timeout=1
    --heartbeat_interval=0.3)
# job MODE I: one elastic job of 3 nodes; MODE etcd: kill the coordinator's
# node; coord: kill the embedded coordinator only; node: kill node 2 (not
# the coordinator's: node 0 started first and hosts it)
job() {
    local mode=$1 i=$2 d="$tmp/$1$2" n pids=() port
    mkdir -p "$d"
    port=$(free_port)
    for n in 0 1 2; do
        if [ "$mode" = etcd ]; then
            $M "${fast[@]}" --rdzv_backend=etcd --rdzv_endpoint="$ep" --rdzv_id="b$i" \
                --etcd_lease=1 "$J" "$d/ck" 100000 10 4 "$d/res" >"$d/o$n" \
                2> >(stamp >"$d/e$n") &
        else
            $M "${fast[@]}" --master_addr=127.0.0.1 --master_port="$port" \
                "$J" "$d/ck" 100000 10 4 "$d/res" >"$d/o$n" 2> >(stamp >"$d/e$n") &
        fi
        pids+=($!)
        [ $n = 0 ] && sleep 0.3
    done
    for _ in $(seq 300); do [ "$(cat "$d"/o* | grep -c 'start gen 0')" = 3 ] && break; sleep 0.05; done
    sleep 0.5
    local victim=2 coord='' agent left=() el=() t0
    if [ "$mode" = etcd ]; then
        coord=$(pgrep -f "msrun coordinator .*--etcd_prefix /msrun/b$i " | head -1)
        agent=$(ps -o ppid= -p "$coord" | tr -d ' ')
        for n in 0 1 2; do [ "${pids[$n]}" = "$agent" ] && victim=$n; done
    elif [ "$mode" = coord ]; then
        coord=$(pgrep -f "msrun coordinator --bind [^ ]*:$port " | head -1)
        victim=
    fi
    t0=$(now)
    if [ -n "$victim" ]; then kill -9 "${pids[$victim]}" $coord; else kill -9 "$coord"; fi
    for n in 0 1 2; do
        [ "$n" != "$victim" ] || continue
        left+=("$d/o$n")
        el+=("$d/e$n")
    done
    case $mode in
    etcd | node)
        for _ in $(seq 300); do [ "$(cat "${left[@]}" | grep -c 'start gen 1')" = 2 ] && break; sleep 0.05; done
        put "$mode" "$(recovered 1 2 "$t0" "${left[@]}")"
        ;;
    coord)
        local again="the coordinator at 127.0.0.1:$port answers again"
        for _ in $(seq 300); do [ -n "$(all "$t0" "$again" "${el[@]}")" ] && break; sleep 0.05; done
        put coord "$(all "$t0" "$again" "${el[@]}")"
        put coord.restarted "$(first "$t0" "restarted it on" "${el[@]}")"
        ;;
    esac
    if [ "$mode" = etcd ]; then
        put etcd.gone "$(first "$t0" "is gone (its node's lease expired)" "${el[@]}")"
        put etcd.won "$(first "$t0" "won the election for" "${el[@]}")"
        put etcd.listening "$(first "$t0" "elected to run the coordinator: it listens on" "${el[@]}")"
        put etcd.followed "$(all "$t0" "the coordinator is now at" "${el[@]}")"
        put etcd.lost "$(first "$t0" "was lost" "${el[@]}")"
    fi
    for n in 0 1 2; do [ "$n" != "$victim" ] && kill -INT "${pids[$n]}"; done
    { wait "${pids[@]}"; } 2>/dev/null
}
for ((i = 0; i < runs; i++)); do
    job etcd "$i"
    job coord "$i"
    job node "$i"
done
launch() {
    local s e
    s=$(now)
    "$M" "$@" --nnodes=1 --local_worker_num=1 --log_level=warn true >/dev/null 2>&1
    e=$(now)
    echo "$s $e" | awk '{printf "%.4f\n", $2 - $1}'
}
for ((i = 0; i < runs * 2; i++)); do
    launch --master_addr=127.0.0.1 --master_port="$(free_port)" >>"$tmp/r.l_static"
    launch --rdzv_backend=etcd --rdzv_endpoint="$ep" --rdzv_id="l$i" --etcd_lease=1 >>"$tmp/r.l_etcd"
done
# row LABEL NAME: median, best and worst of NAME's measurements, and how
# many runs gave one
row() {
    local f=$tmp/r.$2 n
    n=$(grep -c . "$f" 2>/dev/null)
    printf "%-64s %8s %8s %8s %5s\n" "$1" "$(median <"$f")" "$(sort -g "$f" | grep . | head -n1)" \
        "$(sort -g "$f" | tail -n1)" "${n:-0}"
}
printf "failover and launch, %d runs each (seconds)\n" "$runs"
printf "%-64s %8s %8s %8s %5s\n" what median best worst runs
row "etcd: coordinator's node kill -9 -> job re-formed" etcd
row "state file: coordinator kill -9 -> restarted, nodes answered" coord
row "state file: another node's msrun kill -9 (node loss) -> re-formed" node
row "launch, one node, --rdzv_backend=etcd" l_etcd
row "launch, one node, --master_addr (no etcd)" l_static
printf "\nthe etcd failover step by step (seconds after the kill)\n"
printf "%-64s %8s %8s %8s %5s\n" step median best worst runs
row "the leader key's loss seen (lease expired)" etcd.gone
row "election won" etcd.won
row "new coordinator listening" etcd.listening
row "both nodes left follow it" etcd.followed
row "the killed node declared lost" etcd.lost
row "job running again (both workers of the next generation)" etcd
printf "\nthe state-file coordinator's restart step by step (seconds after the kill)\n"
printf "%-64s %8s %8s %8s %5s\n" step median best worst runs
row "coordinator restarted on its state file (listening)" coord.restarted
row "every node answered again: job running again" coord
