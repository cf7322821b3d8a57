#!/bin/bash
# Several msrun processes on loopback form one job: explicit and automatic
# node ranks, a late node, a node whose options disagree, the proxy's
# combining of a node's calls, and workers that join without msrun.
. "$(dirname "$0")/lib.sh"
BATCH=$BUILD/tests/batch_worker
use_token_file


# start_node (lib.sh) gives each msrun 60 s at most; PIDN is timeout's
NODE_LIMIT=60
wait_node() { # wait_node N WANT
    local pid code=0
    eval "pid=\$PID$1"
    wait "$pid" || code=$?
    [ "$code" = "$2" ] || { cat "$TMP/node$1.err" >&2; fail "node $1 exited $code, want $2"; }
}

# 1. two nodes, explicit node ranks
port=$(free_port)
common=(--master_addr=127.0.0.1 --master_port="$port" --worker_num=4 --local_worker_num=2)
start_node 1 "${common[@]}" --node_rank=1 "$WORKER" env
start_node 0 "${common[@]}" --node_rank=0 "$WORKER" env
wait_node 0 0
wait_node 1 0
for r in 0 1; do expect_in "^\[node 0 rank $r\] ENV $r MSR_NODE_RANK=0$" "$TMP/node0.out" "rank $r"; done
for r in 2 3; do expect_in "^\[node 1 rank $r\] ENV $r MSR_NODE_RANK=1$" "$TMP/node1.out" "rank $r"; done
expect_in "ENV 3 MSR_LOCAL_RANK=1$" "$TMP/node1.out" "local rank"
expect_in "ENV 3 WORLD_SIZE=4$" "$TMP/node1.out" "world size"
expect_in "ENV 3 MSR_NODE_COUNT=2$" "$TMP/node1.out" "node count"
expect_in "ENV 2 MSR_AGENT=/" "$TMP/node1.out" "the proxy's socket"
# MASTER_ADDR/PORT are node 0's, the same everywhere
m0=$(grep -o 'MASTER_PORT=[0-9]*' "$TMP/node0.out" | sort -u)
m1=$(grep -o 'MASTER_PORT=[0-9]*' "$TMP/node1.out" | sort -u)
[ -n "$m0" ] && [ "$m0" = "$m1" ] || fail "MASTER_PORT differs between nodes ($m0, $m1)"
ok "two nodes, explicit ranks: contiguous global ranks per node"

# 2. four nodes, ranks assigned by arrival
port=$(free_port)
common=(--master_addr=127.0.0.1 --master_port="$port" --worker_num=8 --local_worker_num=2)
for n in 0 1 2 3; do start_node $n "${common[@]}" "$WORKER" env; done
for n in 0 1 2 3; do wait_node $n 0; done
cat "$TMP"/node[0-3].out >"$TMP/all.out"
for r in 0 1 2 3 4 5 6 7; do
    [ "$(grep -c "^\[node $((r / 2)) rank $r\] ENV $r MSR_RANK=$r$" "$TMP/all.out")" = 1 ] ||
        fail "rank $r exactly once, on node $((r / 2))"
done
for n in 0 1 2 3; do
    [ "$(grep -o "MSR_NODE_RANK=[0-9]" "$TMP/node$n.out" | sort -u | wc -l)" = 1 ] ||
        fail "one node rank per msrun"
done
ok "four nodes, automatic node ranks"

# 3. a late node: the others wait and say so
port=$(free_port)
common=(--master_addr=127.0.0.1 --master_port="$port" --worker_num=2 --local_worker_num=1)
start_node 0 "${common[@]}" "$WORKER" env
wait_for "waiting for nodes: 1 of 2 joined" "$TMP/node0.err" 15 || fail "progress line"
expect_not_in "ENV" "$TMP/node0.out" "no worker before the job forms"
start_node 1 "${common[@]}" "$WORKER" env
wait_node 0 0
wait_node 1 0
ok "a late node is waited for, with a progress line"

# 4. a node whose options disagree is refused, on both sides, and takes no
#    place in the job: a node that agrees joins after it. Node 1 starts once
#    node 0 waits for nodes (its coordinator holds the port, so node 1 cannot
#    host one of its own); node 0 keeps the default cluster_time_out, so that
#    however slow the machine the refusal comes while it waits.
port=$(free_port)
start_node 0 --master_addr=127.0.0.1 --master_port="$port" --worker_num=4 --local_worker_num=2 \
    "$WORKER" env
wait_for "waiting for nodes: 1 of 2 joined" "$TMP/node0.err" 30 || fail "node 0 waits for nodes"
start_node 1 --master_addr=127.0.0.1 --master_port="$port" --worker_num=6 --local_worker_num=3 \
    "$WORKER" env
wait_node 1 2
expect_in "refused this node: this node's worker_num is 6 but the job's is 4" "$TMP/node1.err" \
    "the refused node says why"
wait_for "refused node .*worker_num is 6 there, 4 in the job" "$TMP/node0.err" 30 ||
    fail "the coordinator's side says why"
expect_not_in "ENV" "$TMP/node0.out" "no worker after a refused node"
start_node 1 --master_addr=127.0.0.1 --master_port="$port" --worker_num=4 --local_worker_num=2 \
    "$WORKER" env
wait_node 1 0
wait_node 0 0
expect_in "MSR_NODE_COUNT=2$" "$TMP/node1.out" "the job formed of node 0 and the node that agrees"
# ... and cluster_time_out ends a wait that no node ends (a lone node: what
# it waits for cannot come early, whatever the machine's speed)
port=$(free_port)
start_node 0 --master_addr=127.0.0.1 --master_port="$port" --worker_num=4 --local_worker_num=2 \
    --cluster_time_out=2 "$WORKER" env
wait_node 0 124
expect_in "did not form within 2 s: 1 of 2 nodes ready" "$TMP/node0.err" \
    "the job gives up after cluster_time_out"
expect_not_in "ENV" "$TMP/node0.out" "no worker in a job that never formed"
ok "mismatched options refused on both sides; cluster_time_out ends the wait"

# 5. the proxy combines a node's barrier and allgather into one call each
port=$(free_port)
common=(--master_addr=127.0.0.1 --master_port="$port" --worker_num=8 --local_worker_num=4)
start_node 0 "${common[@]}" "$BATCH"
start_node 1 "${common[@]}" "$BATCH"
wait_node 0 0
wait_node 1 0
cat "$TMP"/node[01].out >"$TMP/all.out"
# 5 rounds: one allgather and one barrier each, plus a last barrier; msr_allgather
# and msr_barrier from 8 ranks on 2 nodes reach the coordinator as 2 calls each
expect_in "COUNTS allgather=10 barrier=12" "$TMP/all.out" "2 coordinator calls per operation"
ok "proxy: 8 ranks on 2 nodes make 2 coordinator calls per allgather and barrier"
# the same with 2 workers per node: the smallest group is combined too
port=$(free_port)
common=(--master_addr=127.0.0.1 --master_port="$port" --worker_num=4 --local_worker_num=2)
start_node 0 "${common[@]}" "$BATCH"
start_node 1 "${common[@]}" "$BATCH"
wait_node 0 0
wait_node 1 0
cat "$TMP"/node[01].out >"$TMP/all.out"
expect_in "COUNTS allgather=10 barrier=12" "$TMP/all.out" "2 coordinator calls per operation"
ok "proxy: 2 workers per node make 1 coordinator call per node and operation"

# 5b. the port is held for a moment by a program that never answers (a
# coordinator still starting looks the same from outside): node 0 waits for
# it to go, then starts the coordinator there
port=$(free_port)
python3 - "$port" "$TMP/held" <<'PY' &
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
open(sys.argv[2], "w").write("held")
time.sleep(3)
PY
holder=$!
wait_for "held" "$TMP/held" 5 || fail "the port holder did not start"
common=(--master_addr=127.0.0.1 --master_port="$port" --worker_num=4 --local_worker_num=2)
start_node 0 "${common[@]}" --node_rank=0 "$WORKER" env
start_node 1 "${common[@]}" --node_rank=1 "$WORKER" env
wait_node 0 0
wait_node 1 0
wait "$holder"
expect_in "CTX 3 rank=3 world=4" "$TMP/node1.out" "the job ran"
ok "a port held for a while by a silent program: node 0 waits and then binds it"

# 6. workers started without msrun join the coordinator directly
port=$(free_port)
env -u MSRUN_TOKEN_FILE MSRUN_TEST_MARKER="$MARKER" MSRUN_TOKEN=direct-token "$MSRUN" coordinator \
    --bind "127.0.0.1:$port" --log_level=warn >"$TMP/coord.out" 2>&1 &
coord=$!
pids=()
for r in 0 1 2 3; do
    env MSRUN_TEST_MARKER="$MARKER" MSR_COORDINATOR="127.0.0.1:$port" MSR_TOKEN=direct-token \
        MSR_RANK=$r MSR_WORLD_SIZE=4 timeout 60 "$WORKER" store >"$TMP/direct$r.out" 2>&1 &
    pids+=($!)
done
for r in 0 1 2 3; do
    wait "${pids[$r]}" || { cat "$TMP/direct$r.out" >&2; fail "direct worker $r"; }
done
kill -TERM "$coord"
wait "$coord" 2>/dev/null
grep -q "store checks passed on rank 3 of 4" "$TMP/direct3.out" || fail "direct join"
ok "direct join: MSR_COORDINATOR and MSR_TOKEN without msrun"
no_leftovers "multinode"
