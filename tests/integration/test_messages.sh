#!/bin/bash
# msrun's words in the first hour (issue 39): a node without its rank yet is
# "node ?", never "node -1"; the lines of a forming job name the missing
# node ranks (or count them) and the time left of --cluster_time_out, and
# the timeout names them; a node given the wrong token is told its token
# was refused; a coordinator that was killed is told apart from a TLS
# handshake that failed.
. "$(dirname "$0")/lib.sh"
unset MSRUN_MASTER_ADDR MSRUN_MASTER_PORT MSRUN_TOKEN MSRUN_TOKEN_FILE MSRUN_JOB_ID
export XDG_RUNTIME_DIR=$TMP/xdg
mkdir -m 700 "$XDG_RUNTIME_DIR"
TOKEN_A=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
TOKEN_B=bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb

# start_node (lib.sh) gives each msrun 60 s at most; PIDN is timeout's
NODE_LIMIT=60
wait_node() { # wait_node N WANT
    local pid
    eval "pid=\$PID$1"
    wait_pid "$pid" 60
    [ "$CODE" = "$2" ] || { cat "$TMP/node$1.err" >&2; fail "node $1 exited $CODE, want $2"; }
}

# 1. ranks by arrival: the line counts the missing nodes and says the time
#    left; Ctrl-C before the rank is known says "node ?"
port=$(free_port)
start_node 0 --master_addr=127.0.0.1 --master_port="$port" --nnodes=2 --local_worker_num=1 \
    --cluster_time_out=50 --token="$TOKEN_A" "$WORKER" env
wait_for "waiting for nodes" "$TMP/node0.err" 30 || fail "no line while forming"
re="waiting for nodes: 1 of 2 joined (awaiting: 1 node not yet joined); [0-9]* s left of "
re+="--cluster_time_out 50 s$"
expect_in "$re" "$TMP/node0.err" "the missing nodes counted, the time left said"
# 2. a node given another token: told its token was refused
start_node 1 --master_addr=127.0.0.1 --master_port="$port" --nnodes=2 --local_worker_num=1 \
    --token="$TOKEN_B" "$WORKER" env
wait_node 1 2
expect_in "the coordinator at 127.0.0.1:$port refused this node's job token: check --token_file" \
    "$TMP/node1.err" "a wrong token is named first"
expect_not_in "its token differs" "$TMP/node1.err" "the old words are gone"
# ... and a node that does not try to host the coordinator (a fixed rank)
start_node 1 --master_addr=127.0.0.1 --master_port="$port" --nnodes=2 --local_worker_num=1 \
    --node_rank=1 --token="$TOKEN_B" "$WORKER" env
wait_node 1 2
re="refused this node: refused: missing or wrong job token (msr-token): check --token_file, "
re+="MSRUN_TOKEN_FILE, --token or MSRUN_TOKEN"
expect_in "$re" "$TMP/node1.err" "a wrong token says where the token comes from"
ok "a wrong token: the coordinator refused this node's token"
kill -INT "$PID0"
wait_node 0 130
expect_in "msrun on node ? was interrupted by SIGINT" "$TMP/node0.err" "an unranked node is node ?"
expect_not_in "node -1" "$TMP/node0.err" "no node -1"
ok "by arrival: the missing nodes counted, the time left said; an unranked node is 'node ?'"

# 3. fixed ranks: the missing rank named, and named again at the timeout
#    (at the bound: the last line still says a time left of at least 1 s)
port=$(free_port)
start_node 0 --master_addr=127.0.0.1 --master_port="$port" --nnodes=3 --node_rank=0 \
    --local_worker_num=1 --cluster_time_out=3 --token="$TOKEN_A" "$WORKER" env
wait_node 0 124
re="waiting for nodes: 1 of 3 joined (awaiting: nodes 1, 2 not yet joined); [1-3] s left of "
re+="--cluster_time_out 3 s$"
expect_in "$re" "$TMP/node0.err" "the missing ranks named"
expect_in "did not form within 3 s: 1 of 3 nodes ready (nodes 1, 2 missing)" "$TMP/node0.err" \
    "the timeout names the missing nodes"
expect_not_in "node -1" "$TMP/node0.err" "no node -1"
ok "fixed ranks: the missing ranks named while waiting and at the timeout"

# 4. the coordinator killed: its node says it closed the connection or is
#    not running, never a TLS handshake; msrun status says it is not running
port=$(free_port)
common=(--master_addr=127.0.0.1 --master_port="$port" --nnodes=2 --local_worker_num=1
    --token="$TOKEN_A" --node_timeout=30)
start_node 0 "${common[@]}" --node_rank=0 sleep 50
start_node 1 "${common[@]}" --node_rank=1 sleep 50
wait_for "started 1 worker" "$TMP/node1.err" 30 || fail "the job started"
wait_for "started 1 worker" "$TMP/node0.err" 30 || fail "the job started on node 0"
m0=$(children_named "$PID0" "msrun ") # PID0 is timeout's
coord=$(children_named "$m0" "msrun coordinator ")
[ -n "$m0" ] && [ -n "$coord" ] || fail "no msrun or coordinator process under node 0"
kill -9 $m0 $coord
wait_pid "$PID0" 30
wait_for "no answer from the coordinator" "$TMP/node1.err" 30 || fail "node 1 did not notice"
re="the coordinator at 127.0.0.1:$port \(closed the connection\|is not running\|is shutting down\)"
expect_in "$re" "$TMP/node1.err" "a killed coordinator: closed, shutting down or not running"
expect_not_in "TLS" "$TMP/node1.err" "no TLS handshake blamed"
CODE=0
timeout -k 5 20 "$MSRUN" status --master_port="$port" --token="$TOKEN_A" >"$TMP/st" 2>&1 ||
    CODE=$?
expect_code 1 "status of a killed coordinator"
expect_in "the coordinator at 127.0.0.1:$port is not running (connection refused)" "$TMP/st" \
    "status says nothing listens"
expect_not_in "TLS" "$TMP/st" "status blames no TLS handshake"
kill -INT "$PID1"
wait_pid "$PID1" 30
ok "a killed coordinator: 'closed the connection' / 'is not running (connection refused)'"

no_leftovers "messages"
exit $FAILED
