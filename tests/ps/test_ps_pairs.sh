#!/bin/bash
# msr_comm_pairs, the links of an asynchronous msr_ps_create
# (tests/ps/ps_pairs.c), 4 ranks: one member's bad list (n and peers at and
# past their bounds, a pair listed by one side only) refused on every
# member; every rank paired with every other; each member out of memory
# in turn, every member failing at once and naming it; each later
# allocation of one member failing in turn, every member alike; UCX
# refusing one member's engines, the others naming it; no pair at all.
. "$(dirname "$0")/../integration/lib.sh"
export MSR_TIMEOUT=20

run_msrun --worker_num=4 --local_worker_num=4 "$BUILD/tests/ps_pairs"
cat "$TMP/out"
expect_code 0 "pairs"
expect_not_in "FAIL" "$TMP/err" "pairs"
for what in "n -1" "n = size, one past" "itself" "peer -1" "peer = size" \
    "a peer listed twice" "peers NULL" "listed by one side only"; do
    expect_in "refused: $what" "$TMP/out" "pairs"
done
expect_in "pairs: 3 each, a message each way and an allreduce on each" "$TMP/out" "pairs"
for who in 0 1 2 3; do
    for me in 0 1 2 3; do
        expect_in "out of memory on $who: rank $me: " "$TMP/out" "pairs"
    done
done
expect_in "later allocations: each of rank 2's [0-9]* failed in turn, every member alike" \
    "$TMP/out" "pairs"
for me in 0 1 2 3; do
    expect_in "ucx refusing on 1: rank $me: " "$TMP/out" "pairs"
done
expect_in "ok pairs" "$TMP/out" "pairs"
no_leftovers "pairs"
ok "pairs: refusals on every member, every rank with every other, out of memory, UCX refusing"
exit "$FAILED"
