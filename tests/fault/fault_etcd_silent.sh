#!/bin/bash
# etcd that stops answering without refusing (SIGSTOP: connections open,
# no replies) while a healthy job writes to the store: every save of the
# coordinator's state then waits out its deadline, holding the
# coordinator's loop for seconds. The nodes must not be blamed for that
# silence: with --node_timeout=1.5 no node is lost, the job runs on and,
# etcd answering again, ends well. The lease (10 s) outlives the silence:
# a longer one is a lost coordinator, and fails over (fault_etcd_away).
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/integration/etcd_lib.sh"
export MSRUN_TOKEN="silent-$RANDOM$RANDOM"
WRITER=$BUILD/tests/durable_writer
start_etcd

# two nodes; each worker streams Sets and Adds at the store until
# $TMP/w<rank>/stop exists
node() {
    env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --rdzv_backend=etcd --rdzv_endpoint="$ETCD_EP" \
        --rdzv_id=silent --nnodes=2 --local_worker_num=1 --etcd_lease=10 --cluster_time_out=60 \
        --heartbeat_interval=0.3 --node_timeout=1.5 --max_restarts=0 \
        bash -c 'mkdir -p "$1/w$MSR_RANK" && exec "$0" write "$1/w$MSR_RANK"' \
        "$WRITER" "$TMP" >"$TMP/$1.log" 2>&1 &
    P[$1]=$!
}
acks() { cat "$TMP"/w*/sets "$TMP"/w*/adds 2>/dev/null | grep -vc '^?'; }
declare -A P
node n0
node n1
for ((i = 0; i < 300 && $(acks) < 20; i++)); do sleep 0.05; done
[ "$(acks)" -ge 20 ] || fail "the writers did not get going: $(cat "$TMP"/n*.log)"

# etcd silent for 5 s while the writes go on
kill -STOP "$ETCD_PID"
sleep 5
kill -CONT "$ETCD_PID"
before=$(acks)
for ((i = 0; i < 200 && $(acks) <= before; i++)); do sleep 0.05; done
[ "$(acks)" -gt "$before" ] ||
    fail "no write acknowledged after etcd answered again: $(tail -n 20 "$TMP"/n*.log)"
touch "$TMP/w0/stop" "$TMP/w1/stop"
for n in n0 n1; do
    wait_pid "${P[$n]}" 60
    expect_code 0 "node $n after etcd's silence: $(cat "$TMP/$n.log")"
done
grep -h "was lost" "$TMP"/n*.log && fail "a node was declared lost for the coordinator's own stall"
stop_etcd
no_leftovers "etcd silent"
ok "etcd silent for 5 s under a writing job: no node lost, the job ends well"
