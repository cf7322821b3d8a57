#!/bin/bash
# Coordinator failover through etcd when the coordinator's node is cut off
# the network (not killed): two network namespaces joined by a veth pair,
# etcd and nodes 1 and 2 in B, node 0 in A, which starts first and so runs
# the coordinator; an elastic job (--nnodes 2:3). The link goes down
# mid-run: node 0's lease expires in etcd, a node of B wins the election,
# starts a coordinator that resumes the job from etcd and the job re-forms
# on B's 2 nodes (world size 2) and ends with exit 0 and the fault-free
# result. The cut-off node keeps no coordinator that the others use: B's
# nodes follow only the one that etcd's leader key names, in B, and node 0,
# alone below the job's minimum, stops (exit 1, no later generation) with
# its coordinator while the link is still down. Then the link comes back
# and the job on B ends undisturbed. The job holds before its end until
# then (lib_fault.sh's gate).
# Skipped (with the reason) where namespaces cannot be made.
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/integration/netns.sh"
. "$MSRUN_SOURCE/tests/fault/lib_fault.sh"
if ! why=$(netns_available); then
    echo "SKIP: $why"
    exit 77
fi
ETCD_HOST=$ADDR_B
ETCD_NS=$NS_B
. "$MSRUN_SOURCE/tests/integration/etcd_lib.sh"
use_token_file
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { netns_down; cleanup; }' EXIT
netns_up || fail "setting up the namespaces"
start_etcd
reference_digest >/dev/null
# the job id lib_fault.sh gave the test: its shared-memory files carry it
job=$MSRUN_JOB_ID
# the cut-off node, alone below --nnodes 2:3, waits out --cluster_time_out
# for the others before it stops: long enough for 3 nodes to gather on a
# loaded machine (the first generation runs within 2 s unloaded), no longer
common=(--rdzv_backend=etcd --rdzv_endpoint="$ETCD_EP" --rdzv_id="$job" --nnodes=2:3
    --local_worker_num=1 --max_restarts=3 --etcd_lease=1 --node_timeout=1
    --heartbeat_interval=0.3 --last_call=0.3 --coordinator_timeout=4 --cluster_time_out=10
    --log_level=info)
args=("$JOB" "$TMP/ck" "$ITERS" "$EVERY" "$SLEEP_MS" "$TMP/result")
# node N NS: one msrun in namespace NS (pid in pN; ip and env exec it, so
# the pid is msrun's own: no timeout wrapper, ctest's limit bounds the test)
node() {
    ip netns exec "$2" env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" "${common[@]}" "${args[@]}" \
        >"$TMP/n$1.out" 2>"$TMP/n$1.err" &
    eval "p$1=$!"
}
node 0 "$NS_A"
for ((i = 0; i < 200; i++)); do
    old=$(etcd_get --print-value-only "/msrun/$job/leader")
    [ -n "$old" ] && break
    sleep 0.05
done
[ "${old%:*}" = "$ADDR_A" ] || fail "node 0 in A did not publish a coordinator ('$old')"
node 1 "$NS_B"
node 2 "$NS_B"
# the first generation on the 3 nodes: 0 when node 2 joined within the
# last call, else the re-form that took it in (a loaded machine can start
# its msrun more than --last_call after node 1's: generation 0 then runs
# on 2 nodes). What follows counts from that generation, g3.
for n in 0 1 2; do
    wait_for "start gen [0-9]* rank [0-9] of 3 " "$TMP/n$n.out" 30 ||
        fail "node $n ran no generation on 3 nodes within 30 s"
done
g3=$(first_gen_of 3 "$TMP/n0.out")
[ -n "$g3" ] || fail "no generation on 3 nodes in node 0's output"
wait_checkpoint "$TMP/ck"
# a random point of the run, or the gate if the run got there first
sleep "$(rand_delay 0.2 0.5)"
ip -n "$NS_A" link set "va$$" down
echo "cut node 0 (A) off: its coordinator was at $old"

# B's nodes elect one of theirs and the job re-forms on them
for n in 1 2; do
    wait_gen_after "$g3" 2 "$TMP/n$n.out" 20 ||
        fail "node $n did not run a generation of world size 2 after $g3 within 20 s of the cut"
done
new=$(etcd_get --print-value-only "/msrun/$job/leader")
[ "${new%:*}" = "$ADDR_B" ] || fail "the leader key holds '$new', not an address in B"
grep -q "won the election for /msrun/$job/leader" "$TMP/n1.err" "$TMP/n2.err" ||
    fail "no node of B won the election"
for n in 1 2; do
    expect_in "the coordinator is now at $new" "$TMP/n$n.err" "node $n followed the new coordinator"
done
in_ns "$NS_B" "$MSRUN" status --master_addr "${new%:*}" --master_port "${new##*:}" --json \
    >"$TMP/status.json" 2>"$TMP/status.err" || fail "msrun status at $new: $(cat "$TMP/status.err")"
python3 - "$TMP/status.json" "$g3" "$p1" "$p2" <<'PY' ||
import json, sys
s = json.load(open(sys.argv[1]))
g3 = int(sys.argv[2])
assert s["generation"] > g3 and s["world_size"] == 2 and s["node_count"] == 2, s
running = [n["pid"] for n in s["nodes"] if n["state"] == "running"]
assert sorted(running) == sorted(map(int, sys.argv[3:])), s["nodes"]
assert g3 in [f["generation"] for f in s["failures"]], s["failures"]
PY
    fail "msrun status after the failover: $(cat "$TMP/status.json")"

# the cut-off node stops by itself, link still down: its coordinator,
# whose saves to etcd get no answer, loses every node, its own included,
# and it cannot re-form alone (--nnodes 2:3); or, when its own node's
# heartbeats get through first, it loses the other two and the job it
# alone still runs fails, waiting for them
wait_pid "$p0" 30
[ "$CODE" = 1 ] || fail "the cut-off node 0 exited $CODE, want 1"
grep -q -E "msrun\[node 0\] error: (the coordinator no longer knows this node|lost the coordinator|job failed \(generation $g3\))" \
    "$TMP/n0.err" || fail "node 0 did not say why it stopped"
later=$(sed -n 's/.*start gen \([0-9]*\) rank .*/\1/p' "$TMP/n0.out" | awk -v g="$g3" '$1 > g' | head -n 1)
[ -z "$later" ] || fail "node 0 ran generation $later, after $g3"
for ((i = 0; i < 40; i++)); do
    [ -z "$(pgrep -f "msrun coordinator --bind $ADDR_A:.*--etcd_prefix /msrun/$job ")" ] && break
    sleep 0.05
done
[ $i -lt 40 ] || fail "node 0's coordinator outlived it by 2 s"
expect_not_in "the coordinator is now at $ADDR_A" "$TMP/n1.err" "node 1 went back to A"
expect_not_in "the coordinator is now at $ADDR_A" "$TMP/n2.err" "node 2 went back to A"
# then the link back: the job on B ends as it would have
ip -n "$NS_A" link set "va$$" up
release
for n in 1 2; do
    eval "pid=\$p$n"
    wait_pid "$pid" 60
    [ "$CODE" = 0 ] || fail "node $n exited $CODE"
done
expect_digest "$TMP/result"
[ -z "$(etcd_get --prefix "/msrun/$job" --keys-only)" ] || fail "the job's keys are left in etcd"
stop_etcd
no_leftovers "etcd partition"
no_shm_leftovers "etcd partition"
ok "etcd partition: the coordinator's node cut off, another elected, the job re-formed on 2 nodes, same result; the cut-off node stopped"
