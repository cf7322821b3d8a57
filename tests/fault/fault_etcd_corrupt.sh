#!/bin/bash
# The coordinator's state in etcd, damaged: as fault_state_corrupt, with
# --etcd_endpoints. A coordinator saves 100 Sets and 30 Adds in etcd; then a
# change in the middle of the log is replaced by garbage, or deleted (the
# numbering then skips one). etcd writes each change whole, so either is
# corruption: a coordinator started on it must refuse (exit 2), name the
# key, and leave etcd's keys as they were; with --state_repair it must
# start, say how many changes it dropped, and hold every write before.
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/integration/etcd_lib.sh"
CLIENT=$BUILD/tests/state_client
port=$(free_port)
TOKEN="etcd-corrupt-$RANDOM$RANDOM"
PREFIX=/msrun/ecorrupt
start_etcd
export MSR_COORDINATOR="127.0.0.1:$port" MSR_TOKEN="$TOKEN" MSR_WORLD_SIZE=1 MSR_RANK=0 \
    MSR_GENERATION=0 MSR_CONNECT_TIMEOUT=20 MSR_TIMEOUT=30

coord() {
    env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" coordinator --bind "127.0.0.1:$port" \
        --token "$TOKEN" --job_id ecorrupt --worker_num 1 --local_worker_num 1 \
        --max_restarts 0 --etcd_endpoints "$ETCD_EP" --log_level warn "$@" 2>"$TMP/err" &
    COORD=$!
}

etcdctl_() {
    etcd_in env ETCDCTL_API=3 etcdctl --endpoints "$ETCD_EP" --dial-timeout 2s \
        --command-timeout 3s "$@"
}

# the log's keys, one a line, in order
log_keys() { etcd_get --prefix "$PREFIX/log/" --keys-only | grep -v '^$'; }
snapshot_of_etcd() { etcd_get --prefix "$PREFIX/" | md5sum; }

coord
env MSRUN_TEST_MARKER="$MARKER" "$CLIENT" fill 100 >"$TMP/out" || fail "fill"
kill "$COORD"
wait_pid "$COORD" 20
log_keys >"$TMP/keys"
n=$(wc -l <"$TMP/keys")
[ "$n" -ge 100 ] || fail "only $n changes in etcd's log"
mid=$((n / 2))
key=$(sed -n "$((mid + 1))p" "$TMP/keys") # the log's change number mid (from 0)
next=$(sed -n "$((mid + 2))p" "$TMP/keys")

# refused WHAT KEY: exits 2, names KEY, leaves etcd's keys as they were
refused() {
    local before
    before=$(snapshot_of_etcd)
    coord
    wait_pid "$COORD" 20
    expect_code 2 "$1"
    expect_in "is corrupt: the change at key $2 " "$TMP/err" "$1"
    [ "$(snapshot_of_etcd)" = "$before" ] || fail "$1: etcd's keys were changed"
}
etcdctl_ put "$key" "garbage" >/dev/null || fail "put"
refused "garbage at $key" "$key"
etcdctl_ del "$key" >/dev/null || fail "del"
refused "$key deleted" "$next"

# --state_repair: exactly the writes before the deleted change. The client
# wrote Set k/0 (in the snapshot), then one change per write: Add after each
# Set whose i % 10 is 0, 3 or 6, in that order.
coord --state_repair
env MSRUN_TEST_MARKER="$MARKER" "$CLIENT" count 100 >"$TMP/out" || fail "count"
kill "$COORD"
wait_pid "$COORD" 20
expect_in "dropping $((n - mid - 1)) changes" "$TMP/err" "--state_repair"
want=$(python3 -c '
import sys
w = []
for i in range(100):
    w.append("s")
    if i % 10 in (0, 3, 6):
        w.append("a")
w = w[: int(sys.argv[1]) + 1]
print("keys %d counter %d" % (w.count("s"), w.count("a")))' "$mid")
got=$(cat "$TMP/out")
[ "$got" = "$want" ] || fail "--state_repair: $got, want $want"
stop_etcd
no_leftovers "etcd corruption"
ok "a bad and a missing change among $n in etcd refused untouched; --state_repair kept $got"
