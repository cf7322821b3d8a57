#!/usr/bin/env bash
# A parameter server's UCX endpoints broken under its steps
# (tests/ps/ps_break.c): two msrun nodes, each in its own network
# namespace (bench/comm/netns_lib.sh), 2 workers on node 0 and 2 servers on
# node 1, their traffic over TCP. Once both workers are pushing, every TCP
# connection of node 1 to node 0 but the launcher's is destroyed (ss -K):
# the processes live on, their endpoints break. Synchronous: every rank's
# call fails with MSR_ERR_PEER_LOST, naming the peer, and the job ends.
# Asynchronous (--ps_staleness=1): the workers' calls fail the same way;
# the servers take them as lost and end their loop. Never a deadline met
# (MSR_TIMEOUT=30 is past the test's wait for the job), never a hang.
# Skips (exit 77) without root, ip, tc, veth or tbf, or without ss -K.
set -u
build=${MSRUN_BUILD:?MSRUN_BUILD is not set}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../netns_test.sh"
prog=$build/tests/ps_break
PORT=29500

FAILED=0
fail() {
    echo "FAIL: $*"
    FAILED=1
}

netns_skip_unusable
netns_remove_stale
netns_up 2 2gbit || { echo "FAIL: cannot build the emulated network"; exit 1; }
ip netns exec "${NS_PREFIX}-n1" ss -K dst 127.0.0.2 >/dev/null 2>&1 ||
    { echo "SKIP: ss -K cannot destroy sockets here"; exit 77; }
(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$out/token")

# run MODE ARGS...: the job; both workers pushing, node 1's connections to
# node 0 destroyed; both msruns must end within 60 s
run() {
    local mode=$1 n p end
    shift
    local pids=()
    for n in 1 0; do
        netns_exec "$n" env MSRUN_TOKEN_FILE="$out/token" MSR_TIMEOUT=30 "$msrun" \
            --worker_num=4 --local_worker_num=2 --ps_servers=2 "$@" \
            --job_id=psbreak-$$-$mode --master_addr="$(netns_addr 0)" --master_port=$PORT \
            --node_rank=$n --grace_period=10 "$prog" >"$out/$mode.node$n" 2>&1 &
        pids+=($!)
    done
    for w in 0 1; do
        wait_for "worker $w: pushing" "$out/$mode.node0" 60 ||
            { fail "$mode: worker $w never pushing"; cat "$out/$mode".node*; }
    done
    # every connection between the nodes but the launchers' (port $PORT)
    ip netns exec "${NS_PREFIX}-n1" ss -K dst "$(netns_addr 0)" \
        and not dport = :$PORT and not sport = :$PORT >/dev/null ||
        fail "$mode: ss -K failed"
    end=$((SECONDS + 60))
    for p in "${pids[@]}"; do
        while kill -0 "$p" 2>/dev/null; do
            [ $SECONDS -ge $end ] && { fail "$mode: the job still runs 60 s after the break"; break 2; }
            sleep 0.1
        done
    done
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    cat "$out/$mode".node*
    grep -q "FAIL" "$out/$mode".node* && fail "$mode: a rank reported FAIL"
    grep -q "MSR_ERR_TIMEOUT" "$out/$mode".node* && fail "$mode: a call waited to its deadline"
    for w in 0 1; do
        grep -q "worker $w: step [0-9]* failed: MSR_ERR_PEER_LOST (.*job rank [0-3]" \
            "$out/$mode.node0" || fail "$mode: worker $w's call did not fail naming a job rank"
    done
}

run sync
for s in 0 1; do
    grep -q "server $s: serve ended: MSR_ERR_PEER_LOST" "$out/sync.node1" ||
        fail "sync: server $s's loop did not fail with the lost peer"
done
[ $FAILED = 0 ] && echo "ok   sync: endpoints broken under the steps, every rank failed with the lost peer"

run async --ps_staleness=1
for s in 0 1; do
    grep -q "server $s: serve ended: MSR_OK" "$out/async.node1" ||
        fail "async: server $s did not end its loop with every worker lost"
    grep -q "parameter server $s: worker [01] lost without a goodbye" "$out/async.node1" ||
        fail "async: server $s did not say a worker was lost"
done
[ $FAILED = 0 ] && echo "ok   async: endpoints broken under the steps, the servers took the workers as lost"
exit $FAILED
