#!/bin/bash
# The coordinator's state in etcd: as fault_durable_writes, with the state
# in a real etcd (--etcd_endpoints) instead of a file. A client streams Sets
# and Adds at a standalone coordinator that is killed with SIGKILL and
# restarted from etcd several times; every acknowledged Set is there after
# and the counter equals the acknowledged Adds. Then the state is in etcd
# where docs/clusters.md says (/msrun/<job>/state), and a coordinator
# started with no etcd to reach says so instead of starting empty.
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/integration/etcd_lib.sh"
WRITER=$BUILD/tests/durable_writer
KILLS=${ETCD_KILLS:-8}
port=$(free_port)
TOKEN="etcd-durable-$RANDOM$RANDOM"
start_etcd

start_coord() {
    env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" coordinator --bind "127.0.0.1:$port" \
        --token "$TOKEN" --job_id edur --worker_num 1 --local_worker_num 1 --max_restarts 0 \
        --etcd_endpoints "$ETCD_EP" --log_level info 2>>"$TMP/coord.err" &
    COORD=$!
}

acks() { cat "$TMP/w/sets" "$TMP/w/adds" 2>/dev/null | grep -vc '^?'; }

mkdir -p "$TMP/w"
start_coord
export MSR_COORDINATOR="127.0.0.1:$port" MSR_TOKEN="$TOKEN" MSR_WORLD_SIZE=1 MSR_RANK=0 \
    MSR_GENERATION=0 MSR_CONNECT_TIMEOUT=20 MSR_TIMEOUT=30
env MSRUN_TEST_MARKER="$MARKER" "$WRITER" write "$TMP/w" >"$TMP/out" 2>"$TMP/err" &
WRITER_PID=$!
for ((k = 1; k <= KILLS; k++)); do
    before=$(acks)
    # new answers once the client is back (20 s, a deadline: see
    # fault_durable_writes.sh)
    for ((i = 0; i < 400 && $(acks) <= before; i++)); do sleep 0.05; done
    [ "$(acks)" -gt "$before" ] || fail "no write acknowledged before kill $k"
    sleep "$(python3 -c 'import random; print("%.3f" % random.uniform(0, 0.08))')"
    kill -9 "$COORD"
    wait "$COORD" 2>/dev/null
    kill -0 "$WRITER_PID" 2>/dev/null || fail "the writer died"
    start_coord
done
before=$(acks)
for ((i = 0; i < 400 && $(acks) <= before; i++)); do sleep 0.05; done
[ "$(acks)" -gt "$before" ] || fail "no write acknowledged after the last restart"
touch "$TMP/w/stop"
wait_pid "$WRITER_PID" 60
expect_code 0 "the writer"
CODE=0
env MSRUN_TEST_MARKER="$MARKER" "$WRITER" check "$TMP/w" >"$TMP/out" 2>"$TMP/err" || CODE=$?
cat "$TMP/out"
expect_code 0 "the check after $KILLS kills"
grep -q "resumed job edur from etcd" "$TMP/coord.err" || fail "no coordinator said it resumed from etcd"
etcd_get --keys-only /msrun/edur/state | grep -qx /msrun/edur/state ||
    fail "no /msrun/edur/state in etcd"
kill "$COORD" 2>/dev/null
wait_pid "$COORD" 20

# etcd gone: a coordinator cannot resume, and says why (exit 2)
stop_etcd
CODE=0
env MSRUN_TEST_MARKER="$MARKER" timeout 30 "$MSRUN" coordinator --bind "127.0.0.1:$port" \
    --token "$TOKEN" --job_id edur --etcd_endpoints "$ETCD_EP" >"$TMP/out" 2>"$TMP/err" || CODE=$?
expect_code 2 "a coordinator without etcd"
expect_in "etcd unreachable" "$TMP/err" "a coordinator without etcd"
no_leftovers "etcd durable writes"
ok "$KILLS kill -9 of a coordinator keeping its state in etcd: every acknowledged write kept, each Add once; no etcd: a clear error"
