#!/bin/bash
# Out of memory at a parameter server's start (tests/ps/ps_start_oom.c) on
# a job of two msrun agents on loopback: 2 workers on node 0, 2 servers on
# node 1. In each mode (synchronous, and asynchronous: the pairs) each
# start-up allocation of a worker (job rank 0) and of a server (job rank
# 3) fails in turn: every rank fails at once and alike, the others naming
# that rank and the cause, and the next start works.
# MSR_TIMEOUT=20: a rank that waited for the failing one instead of failing
# at once meets its deadline (MSR_ERR_TIMEOUT, a failure here) within the
# test's time.
. "$(dirname "$0")/../integration/lib.sh"
use_token_file
export MSR_TIMEOUT=20
NODE_LIMIT=90

wait_node() { # wait_node N WHAT: node N's msrun must exit 0
    local pid code=0
    eval "pid=\$PID$1"
    wait "$pid" || code=$?
    [ "$code" = 0 ] || { cat "$TMP/node$1.err" >&2; fail "$2: node $1 exited $code, want 0"; }
}

for mode in sync async; do
    stale=()
    [ "$mode" = async ] && stale=(--ps_staleness=1)
    for who in 0 3; do
        what="$mode, rank $who"
        port=$(free_port)
        common=(--master_addr=127.0.0.1 --master_port="$port" --worker_num=4 --local_worker_num=2
            --ps_servers=2 "${stale[@]}" "$BUILD/tests/ps_start_oom" "$who")
        start_node 1 --node_rank=1 "${common[@]}"
        start_node 0 --node_rank=0 "${common[@]}"
        wait_node 0 "$what"
        wait_node 1 "$what"
        cat "$TMP/node0.out" "$TMP/node1.out"
        for n in 0 1; do expect_not_in "FAIL" "$TMP/node$n.err" "$what"; done
        for r in 0 1 2 3; do
            n=$((r / 2))
            if [ "$r" = "$who" ]; then
                expect_in "rank $r\] start oom: rank $r: .*out of memory" "$TMP/node$n.out" "$what"
            else
                expect_in "rank $r\] start oom: rank $r: .*(job rank $who) failed (out of memory)" \
                    "$TMP/node$n.out" "$what"
            fi
        done
        expect_in "start allocations: each of rank $who's [0-9]* failed in turn, every rank alike" \
            "$TMP/node0.out" "$what"
        expect_in "ok start oom" "$TMP/node0.out" "$what"
        no_leftovers "$what"
        ok "$what: each start-up allocation failing, every rank fails at once, naming it"
    done
done
exit "$FAILED"
