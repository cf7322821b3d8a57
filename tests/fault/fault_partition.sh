#!/bin/bash
# A network partition of one node (two network namespaces joined by a veth
# pair; the link goes down mid-run): the coordinator's side declares the node
# lost and, with --nnodes 1:2, carries on alone to the fault-free result; the
# cut-off node gives up on the coordinator and stops its worker. The job
# holds before its end until the link is down (lib_fault.sh's gate). Skipped
# (with the reason) where namespaces cannot be made.
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/integration/netns.sh"
. "$MSRUN_SOURCE/tests/fault/lib_fault.sh"
use_token_file
if ! why=$(netns_available); then
    echo "SKIP: $why"
    exit 0
fi
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { netns_down; cleanup; }' EXIT
netns_up || fail "setting up the namespaces"
reference_digest >/dev/null
common=(--master_addr="$ADDR_A" --master_port=18119 --nnodes=1:2 --local_worker_num=1
    --max_restarts=3 --node_timeout=2 --coordinator_timeout=4 --last_call=0.3)
args=("$JOB" "$TMP/ck" "$ITERS" "$EVERY" "$SLEEP_MS" "$TMP/result")
in_ns "$NS_A" env MSRUN_TEST_MARKER="$MARKER" MSR_TIMEOUT=3 timeout -k 5 120 "$MSRUN" \
    "${common[@]}" "${args[@]}" >"$TMP/a.out" 2>"$TMP/a.err" &
pa=$!
# A starts the coordinator (B must not)
wait_coordinator "$ADDR_A" 18119 in_ns "$NS_A"
in_ns "$NS_B" env MSRUN_TEST_MARKER="$MARKER" MSR_TIMEOUT=3 timeout -k 5 120 "$MSRUN" \
    "${common[@]}" "${args[@]}" >"$TMP/b.out" 2>"$TMP/b.err" &
pb=$!
wait_for "start gen [0-9]* rank [01] of 2" "$TMP/a.out" 30 || fail "the 2 nodes formed"
# a random point of the run, or the gate if the run got there first
sleep "$(rand_delay 0.2 0.6)"
ip -n "$NS_B" link set "vb$$" down
echo "partitioned node B"
release
wait_pid "$pa" 90
ca=$CODE
wait_pid "$pb" 90
cb=$CODE
[ "$ca" = 0 ] || { cat "$TMP/a.err" >&2; fail "node A exited $ca"; }
[ "$cb" != 0 ] || fail "the cut-off node B should not succeed"
expect_in "was lost" "$TMP/a.err" "A's coordinator declared B lost"
expect_in "lost the coordinator" "$TMP/b.err" "B gave up on the coordinator"
expect_in "start gen [1-9]* rank 0 of 1" "$TMP/a.out" "A carried on alone"
expect_digest "$TMP/result"
no_leftovers "partition"
no_shm_leftovers "partition"
ok "partition: the node lost, the job carried on, same result; the cut-off node stopped"
