#!/bin/bash
# A member out of memory inside a collective (tests/comm/comm_oom.c), at 4,
# 6 and 8 ranks: for each collective whose start allocates, and for a
# request of its own, the chosen members' allocation fails; every member
# fails at once with MSR_ERR_NO_MEMORY (the communicators' deadline is past
# this script's limit), the others naming a failing member; the world
# stays usable; notices of leaving that come after their receive is gone,
# and the parts of the failed collectives that their members never
# received, are received when the engine closes (UCX warns of none). 6 and 8
# ranks add the allgathers (whose start allocates only there: 2 (n - 1) op
# slots, past the 8 a request holds) and the cases that fail their last
# members (partners not a power of two apart).
. "$(dirname "$0")/../integration/lib.sh"

for np in 4 6 8; do
    # debug: the engines' count of the notices they drain at their close
    MSR_LOG_LEVEL=debug run_msrun --worker_num=$np --local_worker_num=$np "$BUILD/tests/comm_oom"
    cat "$TMP/out"
    expect_code 0 "oom, $np ranks"
    expect_not_in "FAIL" "$TMP/err" "oom, $np ranks"
    cases=("allreduce(direct)" "allreduce(rd)" "allreduce(ring)" "reduce_scatter(direct)"
        "reduce_scatter(ring)" "broadcast(binomial)"
        "reduce(binomial)" "reduce(chain)" "alltoall(in place)" "alltoallv"
        "allreduce(ring), ranks 1 and 2" "reduce(binomial), ranks 0, 2 and 3" "a request")
    [ "$np" -ge 6 ] && cases+=("allgather(direct)" "allgather(ring)" "allgather(direct), rank 5" "allgather(ring), rank 5"
        "allgather(ring), ranks 0 and 4" "allreduce(rd), rank 5" "allreduce(ring), rank 4")
    [ "$np" -ge 8 ] && cases+=("allgather(direct), rank 7" "allgather(ring), ranks 6 and 7")
    for what in "${cases[@]}"; do
        for ((me = 0; me < np; me++)); do
            expect_in "oom $what: rank $me: " "$TMP/out" "oom, $np ranks"
        done
    done
    # the cases of a bigger world stay out of a smaller one
    [ "$np" -lt 6 ] && expect_not_in "oom allgather(direct): " "$TMP/out" "oom, $np ranks"
    [ "$np" -lt 8 ] && expect_not_in "oom allgather(direct), rank 7:" "$TMP/out" "oom, $np ranks"
    # rank 0's late notices of leaving (comm_oom.c), one from each other
    # member, all received at its engine's close (the drain goes on past
    # any notice, whatever its size), and UCX warns of none left
    drained=$(sed -n 's/^\[node 0 rank 0\] .*engine w[0-9]*: \([0-9]*\) notices drained.*/\1/p' \
        "$TMP/err" | sort -n | tail -1)
    [ "${drained:-0}" -ge $((np - 1)) ] ||
        fail "oom, $np ranks: rank 0's world engine drained ${drained:-no} notices, want $((np - 1)) or more"
    # UCX writes its warnings to standard output
    expect_not_in "was not matched" "$TMP/out" "oom, $np ranks"
    expect_not_in "was not matched" "$TMP/err" "oom, $np ranks"
    expect_in "ok oom" "$TMP/out" "oom, $np ranks"
    no_leftovers "oom, $np ranks"
done
ok "oom: every member fails at once, naming the member out of memory, at 4, 6 and 8 ranks"
exit "$FAILED"
