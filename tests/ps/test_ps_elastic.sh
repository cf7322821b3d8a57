#!/bin/bash
# A parameter server job through an elastic re-form: two msrun agents
# (--nnodes=1:2, 2 ranks each, --ps_servers=1) run ps_worker elastic, 3
# asynchronous workers pushing to one durable server; the agent that did
# not start the coordinator is killed with SIGKILL under the pushes, and
# the job re-forms on the node left: 1 worker and 1 server, the durable
# state resharded from 3 workers to 1 (the logged pushes replayed with
# their own 3 workers). The new generation's worker finds every push the
# 3 workers had acknowledged in the row (and at most one more each), adds
# 20 and the job ends with exit 0.
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
start 0
wait_coordinator 127.0.0.1 "$port"
start 1
# a generation of both nodes, its workers pushing
wait_for "elastic: generation [0-9]*, 3 workers" "$TMP/n0.out" 30 ||
    wait_for "elastic: generation [0-9]*, 3 workers" "$TMP/n1.out" 1 ||
    fail "no generation of 2 nodes (3 workers) began"
acked() { cat "$dir"/acked-g*-w* 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
for ((i = 0; i < 600; i++)); do
    [ "$(acked)" -ge 60 ] && break
    sleep 0.05
done
[ "$(acked)" -ge 60 ] || fail "the workers did not reach 60 acknowledged pushes in 30 s"
kill -9 "$p1" || fail "node 1's msrun was gone before the kill"
wait "$p1" 2>/dev/null
echo "killed node 1's msrun at $(acked) acknowledged pushes"
wait_pid "$p0" 90
[ "$CODE" = 0 ] || { tail -n 20 "$TMP/n0.err" >&2; fail "node 0 exited $CODE"; }
cat "$TMP/n0.out"
expect_in "elastic: generation [1-9][0-9]*, 1 workers: the row holds" "$TMP/n0.out" \
    "the re-formed generation's check"
expect_in "the row grew from" "$TMP/n0.out" "the last pushes"
expect_in "ok elastic" "$TMP/n0.out" "the job's end"
cat "$TMP"/n[01].err >"$TMP/err"
expect_not_in "FAIL" "$TMP/err" "the workers' checks"
# the layout: 1 server, 1 worker, a generation past the first
got=$(od -An -t u8 -j 8 -N 24 "$dir/ps-layout" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
case $got in
"1 1 "[1-9]*) ;;
*) fail "the layout holds '$got', want 1 server, 1 worker, generation 1 or later" ;;
esac
no_leftovers "ps elastic"
no_shm_leftovers "ps elastic"
ok "a durable parameter server through an elastic re-form from 3 workers to 1: no push lost"
exit "$FAILED"
