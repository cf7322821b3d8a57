#!/bin/bash
# A parameter server job through an elastic job's growth and shrinking
# (--nnodes=1:2, 2 ranks a node, --ps_servers=1; ps_worker elastic, the
# workers asynchronous, the server durable): one agent alone first (1
# worker, 1 server); a second joins and the job re-forms on both (3
# workers: the state resharded from 1 worker to 3); that agent is killed
# with SIGKILL under the pushes and the job re-forms on the node left (1
# worker again: resharded from 3 to 1). Each generation's first worker
# finds every push acknowledged before in the row (and at most one more
# per worker: applied, not acknowledged), which holds only if each old
# log was replayed with its own number of workers; the last adds 20 and
# the job ends with exit 0.
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/fault/lib_fault.sh" # wait_coordinator, no_shm_leftovers
use_token_file
PSW=$BUILD/tests/ps_worker
dir=$TMP/shards
mkdir -m 700 "$dir"
port=$(free_port)
common=(--master_addr=127.0.0.1 --master_port="$port" --nnodes=1:2 --local_worker_num=2
    --ps_servers=1 --max_restarts=3 --node_timeout=2 --last_call=0.3 --grace_period=5
    --log_level=info)
start() { # start N: agent N in the background, its pid in pN
    env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" "${common[@]}" "$PSW" elastic "$dir" \
        >"$TMP/n$1.out" 2>"$TMP/n$1.err" &
    eval "p$1=$!"
}
acked() { cat "$dir"/acked-g*-w* 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
# acked_past N: until more than N pushes were acknowledged in all (30 s)
acked_past() {
    local i
    for ((i = 0; i < 600; i++)); do
        [ "$(acked)" -gt "$1" ] && return 0
        sleep 0.05
    done
    fail "the workers did not get past $1 acknowledged pushes in 30 s"
}
start 0
wait_coordinator 127.0.0.1 "$port"
wait_for "elastic: generation 0, 1 workers" "$TMP/n0.out" 30 ||
    fail "node 0 alone did not start 1 worker"
acked_past 30
start 1
# a generation of both nodes, its workers pushing
wait_for "elastic: generation [1-9][0-9]*, 3 workers" "$TMP/n0.out" 30 ||
    fail "no generation of 2 nodes (3 workers) began after node 1 joined"
acked_past "$(($(acked) + 60))"
kill -9 "$p1" || fail "node 1's msrun was gone before the kill"
wait "$p1" 2>/dev/null
echo "killed node 1's msrun at $(acked) acknowledged pushes"
wait_pid "$p0" 90
[ "$CODE" = 0 ] || { tail -n 20 "$TMP/n0.err" >&2; fail "node 0 exited $CODE"; }
cat "$TMP/n0.out"
expect_in "elastic: generation [2-9][0-9]*, 1 workers: the row holds" "$TMP/n0.out" \
    "the re-formed generation's check"
expect_in "the row grew from" "$TMP/n0.out" "the last pushes"
expect_in "ok elastic" "$TMP/n0.out" "the job's end"
cat "$TMP"/n[01].err >"$TMP/err"
expect_not_in "FAIL" "$TMP/err" "the workers' checks"
# the layout: 1 server, 1 worker, a generation past the first
got=$(od -An -t u8 -j 8 -N 24 "$dir/ps-layout" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
case $got in
"1 1 "[2-9]*) ;;
*) fail "the layout holds '$got', want 1 server, 1 worker, generation 2 or later" ;;
esac
no_leftovers "ps elastic"
no_shm_leftovers "ps elastic"
ok "a durable parameter server through an elastic job grown from 1 worker to 3 and shrunk to 1: no push lost"
exit "$FAILED"
