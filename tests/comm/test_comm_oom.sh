#!/bin/bash
# A member out of memory inside a collective (tests/comm/comm_oom.c), 4
# ranks: for each collective whose start allocates, and for a request of
# its own, the chosen members' allocation fails; every member fails at once
# with MSR_ERR_NO_MEMORY (the communicators' deadline is past this script's
# limit), the others naming a failing member; the world stays usable.
. "$(dirname "$0")/../integration/lib.sh"

run_msrun --worker_num=4 --local_worker_num=4 "$BUILD/tests/comm_oom"
cat "$TMP/out"
expect_code 0 "oom"
expect_not_in "FAIL" "$TMP/err" "oom"
for what in "allreduce(direct)" "allreduce(rd)" "allreduce(ring)" "reduce_scatter(direct)" \
    "reduce_scatter(ring)" "broadcast(binomial)" "reduce(binomial)" "reduce(chain)" \
    "alltoall(in place)" "alltoallv" "allreduce(ring), ranks 1 and 2" \
    "reduce(binomial), ranks 0, 2 and 3" "a request"; do
    for me in 0 1 2 3; do
        expect_in "oom $what: rank $me: " "$TMP/out" "oom"
    done
done
expect_in "ok oom" "$TMP/out" "oom"
no_leftovers "oom"
ok "oom: every member fails at once, naming the member out of memory"
exit "$FAILED"
