#!/bin/bash
# The store's semantics across 8 real worker processes on this machine, and
# a worker with a wrong token refused.
. "$(dirname "$0")/lib.sh"

run_msrun --worker_num=8 --local_worker_num=8 "$WORKER" store
expect_code 0 "store checks"
[ "$(grep -c "store checks passed on rank" "$TMP/out")" = 8 ] || fail "all 8 ranks passed"
ok "waiting get, add under contention, compare-set, allgather order, barrier, delete, num_keys (8 ranks)"

run_msrun --worker_num=2 --local_worker_num=2 "$WORKER" token
expect_code 0 "token refusal"
expect_in "refused: .*token" "$TMP/out" "the refusal says why"
expect_in "num_keys refused: .*token" "$TMP/out" "num_keys' refusal says why"
ok "a wrong token is refused (PERMISSION_DENIED), num_keys too"
run_msrun --worker_num=2 --local_worker_num=2 "$WORKER" counts
expect_code 0 "huge counts"
expect_in "local_count 100000000 is more than this node's 2 workers" "$TMP/out" "the proxy says why"
expect_in "count 16777216 is not in 1..2" "$TMP/out" "the coordinator says why"
ok "huge barrier and allgather counts refused by the node's msrun and the coordinator"
no_leftovers "store"
