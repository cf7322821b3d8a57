#!/bin/bash
# Two hosts for real: a 2-node job in two network namespaces joined by a veth
# pair; the coordinator is reached over that link. Skipped (with the reason)
# where namespaces cannot be made.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns.sh"
use_token_file
if ! why=$(netns_available); then
    echo "SKIP: $why"
    exit 0
fi
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { netns_down; cleanup; }' EXIT
netns_up || fail "setting up the namespaces"

port=18118
common=(--master_addr="$ADDR_A" --master_port=$port --worker_num=4 --local_worker_num=2)
in_ns "$NS_B" env MSRUN_TEST_MARKER="$MARKER" timeout -k 5 60 "$MSRUN" "${common[@]}" \
    "$WORKER" env >"$TMP/b.out" 2>"$TMP/b.err" &
pid_b=$!
in_ns "$NS_A" env MSRUN_TEST_MARKER="$MARKER" timeout -k 5 60 "$MSRUN" "${common[@]}" \
    --node_rank=0 "$WORKER" env >"$TMP/a.out" 2>"$TMP/a.err" &
pid_a=$!
ca=0
cb=0
wait $pid_a || ca=$?
wait $pid_b || cb=$?
[ $ca = 0 ] || { cat "$TMP/a.err" >&2; fail "node A exited $ca"; }
[ $cb = 0 ] || { cat "$TMP/b.err" >&2; fail "node B exited $cb"; }
expect_in "ENV 0 MSR_NODE_RANK=0" "$TMP/a.out" "node A is node 0"
expect_in "ENV 2 MSR_NODE_RANK=1" "$TMP/b.out" "node B is node 1"
expect_in "ENV 3 MASTER_ADDR=$ADDR_A" "$TMP/b.out" "MASTER_ADDR is node 0's address"
expect_in "ENV 3 MSR_COORDINATOR=$ADDR_A:$port" "$TMP/b.out" "the coordinator over the link"
expect_in "CTX 3 rank=3 world=4 local=1/2 node=1/2" "$TMP/b.out" "libmsrun on node B"
ok "2 nodes in 2 network namespaces, coordinator over a veth link"

# the store across the link, through node B's proxy
in_ns "$NS_B" env MSRUN_TEST_MARKER="$MARKER" timeout -k 5 60 "$MSRUN" "${common[@]}" \
    "$WORKER" store >"$TMP/b.out" 2>"$TMP/b.err" &
pid_b=$!
in_ns "$NS_A" env MSRUN_TEST_MARKER="$MARKER" timeout -k 5 60 "$MSRUN" "${common[@]}" \
    "$WORKER" store >"$TMP/a.out" 2>"$TMP/a.err" &
pid_a=$!
ca=0
cb=0
wait $pid_a || ca=$?
wait $pid_b || cb=$?
[ $ca = 0 ] && [ $cb = 0 ] || { cat "$TMP/a.err" "$TMP/b.err" >&2; fail "store job ($ca, $cb)"; }
[ "$(cat "$TMP/a.out" "$TMP/b.out" | grep -c "store checks passed")" = 4 ] || fail "4 ranks passed"
ok "the store's semantics across the link"
no_leftovers "netns"
