#!/bin/bash
# --rdzv_backend=etcd when etcd is not there: at the start, msrun says so and
# exits 124 within --cluster_time_out (no worker runs); lost while the job
# runs, the job runs on to its end and each msrun says once that failover
# is unavailable. Without the job's token, msrun refuses at once (exit 2).
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
[ $ms -lt 4000 ] || fail "took ${ms} ms with --cluster_time_out=2 (want under 4000)"

# etcd lost while the job runs
start_etcd
for i in 0 1; do
    env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --rdzv_backend=etcd --rdzv_endpoint="$ETCD_EP" \
        --rdzv_id=lost --nnodes=2 --local_worker_num=1 --etcd_lease=1 --cluster_time_out=60 \
        bash -c 'touch "$0/started.$MSR_RANK"; for i in $(seq 40); do sleep 0.1; done' "$TMP" \
        >"$TMP/n$i.log" 2>&1 &
    P[$i]=$!
done
for ((i = 0; i < 300; i++)); do
    [ -e "$TMP/started.0" ] && [ -e "$TMP/started.1" ] && break
    sleep 0.05
done
[ -e "$TMP/started.0" ] && [ -e "$TMP/started.1" ] || fail "the job did not start"
stop_etcd
for i in 0 1; do
    rc=0
    wait "${P[$i]}" || rc=$?
    [ $rc -eq 0 ] || fail "node $i exited $rc with etcd gone: $(cat "$TMP/n$i.log")"
    n=$(grep -c "etcd unreachable: coordinator failover is unavailable until it returns" \
        "$TMP/n$i.log")
    [ "$n" -eq 1 ] || fail "node $i said it $n times: $(cat "$TMP/n$i.log")"
done
echo "etcd away: exit 124 in ${ms} ms at the start; lost mid-job, the job ended well and each node said so once"
