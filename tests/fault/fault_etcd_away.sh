#!/bin/bash
# --rdzv_backend=etcd when etcd is not there: at the start, msrun says so and
# exits 124 within --cluster_time_out (no worker runs); lost while the job
# runs, the job runs on and each msrun says once that failover is
# unavailable; back (same data, same port), each says once that it answers
# again, and a kill of the coordinator's node fails over as before: the
# job re-forms and ends well. Without the job's token, msrun refuses at once
# (exit 2).
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/integration/etcd_lib.sh"
export MSRUN_TOKEN="away-$RANDOM$RANDOM"

# no token: refused before anything starts
rc=0
env -u MSRUN_TOKEN "$MSRUN" --rdzv_backend=etcd --rdzv_endpoint=127.0.0.1:1 --nnodes=2 \
    --local_worker_num=1 true 2>"$TMP/notoken" || rc=$?
[ $rc -eq 2 ] || fail "without a token: exit $rc, not 2"
grep -q "needs the job's token on every node" "$TMP/notoken" || fail "no reason: $(cat "$TMP/notoken")"

# etcd unreachable at the start
dead=$(free_port)
start=$(date +%s%N)
rc=0
env MSRUN_TEST_MARKER="$MARKER" timeout 30 "$MSRUN" --rdzv_backend=etcd \
    --rdzv_endpoint="127.0.0.1:$dead" --rdzv_id=away --nnodes=2 --local_worker_num=1 \
    --cluster_time_out=2 touch "$TMP/ran" 2>"$TMP/start.err" || rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
[ $rc -eq 124 ] || fail "etcd unreachable at the start: exit $rc, not 124: $(cat "$TMP/start.err")"
grep -q "etcd unreachable at 127.0.0.1:$dead" "$TMP/start.err" ||
    fail "no clear message: $(cat "$TMP/start.err")"
[ ! -e "$TMP/ran" ] || fail "a worker ran"
# --cluster_time_out was kept, not the default (600 s, cut at timeout's 30 s,
# which also exits 124): the bound lies halfway, far from both
[ $ms -lt 15000 ] || fail "took ${ms} ms with --cluster_time_out=2 (want under 15000)"

# etcd lost while the job runs, then back: the workers run until the test
# touches $TMP/done (60 s at most)
start_etcd
# node NAME: one msrun of job "lost" (output in $TMP/NAME.log)
node() {
    env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --rdzv_backend=etcd --rdzv_endpoint="$ETCD_EP" \
        --rdzv_id=lost --nnodes=2 --local_worker_num=1 --etcd_lease=1 --cluster_time_out=60 \
        --heartbeat_interval=0.3 --node_timeout=1.5 --max_restarts=1 \
        bash -c 'touch "$0/started.$MSR_GENERATION.$MSR_RANK"
            for ((i = 0; i < 600; i++)); do [ -e "$0/done" ] && exit 0; sleep 0.1; done
            exit 3' "$TMP" >"$TMP/$1.log" 2>&1 &
    P[$1]=$!
}
# started G: waits until both workers of generation G run
started() {
    local i
    for ((i = 0; i < 300; i++)); do
        [ -e "$TMP/started.$1.0" ] && [ -e "$TMP/started.$1.1" ] && return 0
        sleep 0.05
    done
    fail "generation $1 did not start on both nodes: $(cat "$TMP"/n*.log)"
}
# said N TEXT: waits (10 s at most) until nodes n0 and n1 each said TEXT,
# then checks that each said it exactly N times
said() {
    local i f
    for ((i = 0; i < 200; i++)); do
        [ "$(grep -lF -- "$2" "$TMP/n0.log" "$TMP/n1.log" | wc -l)" = 2 ] && break
        sleep 0.05
    done
    for f in n0 n1; do
        [ "$(grep -cF -- "$2" "$TMP/$f.log")" -eq "$1" ] ||
            fail "$f said '$2' $(grep -cF -- "$2" "$TMP/$f.log") times, not $1: $(cat "$TMP/$f.log")"
    done
}
declare -A P
node n0
node n1
started 0
stop_etcd
said 1 "etcd unreachable: coordinator failover is unavailable until it returns"
# etcd back on its data and ports: each node says so once
start_etcd
said 1 "etcd at $ETCD_EP answers again: coordinator failover is available"
# and failover works again: the coordinator's node is killed, the other
# node and a replacement re-form the job under a newly elected coordinator
coord=$(pgrep -f "msrun coordinator .*--etcd_prefix /msrun/lost " | head -1)
[ -n "$coord" ] || fail "no coordinator to kill"
agent=$(ps -o ppid= -p "$coord" | tr -d ' ')
victim=
for n in n0 n1; do [ "${P[$n]}" = "$agent" ] && victim=$n; done
[ -n "$victim" ] || fail "the coordinator $coord is not a child of either node"
kill -9 "$agent" "$coord"
wait "${P[$victim]}" 2>/dev/null
unset "P[$victim]"
node r
started 1
grep -q "elected to run the coordinator" "$TMP"/n*.log "$TMP/r.log" ||
    fail "no node took the coordinator over after etcd came back"
touch "$TMP/done"
for n in "${!P[@]}"; do
    rc=0
    wait "${P[$n]}" || rc=$?
    [ $rc -eq 0 ] || fail "$n exited $rc: $(cat "$TMP/$n.log")"
done
stop_etcd
echo "etcd away: exit 124 in ${ms} ms at the start; lost mid-job, each node said so once, and once that it answers again; then a failover re-formed the job"
