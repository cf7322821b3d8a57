#!/usr/bin/env bash
# Relays of relays with the real msrun (issue 40): a tree of depth 2 of
# `msrun relay` processes on loopback (a leaf relay sending its batches to
# a middle relay, which serves a node of its own too): the job forms
# through it, the coordinator recording the middle relay for every node,
# and runs to the end; the middle relay killed while the job runs: the
# whole subtree calls the coordinator itself and the job ends well; then
# rdzv_scale --relay_levels (bench/rdzv): 2,048 simulated nodes through two
# levels of relays of 32 (64 relays under 2), every node given a rank of
# its own, and 4 levels (the bound) served where 5 are refused up front;
# a relay's address that is not HOST:PORT refused as bad input (exit 2):
# a node's --relay, a relay's --coordinator (port 65536) and --bind.
. "$(dirname "$0")/lib.sh"
unset MSRUN_MASTER_ADDR MSRUN_MASTER_PORT MSRUN_TOKEN MSRUN_TOKEN_FILE MSRUN_JOB_ID MSRUN_RELAY \
    MSRUN_RELAYS
use_token_file
cat >"$TMP/hold.sh" <<EOS
#!/bin/sh
while [ ! -e "$TMP/stop" ]; do sleep 0.05; done
EOS
chmod +x "$TMP/hold.sh"

# start_relay NAME UP_PORT SUBTREE: a relay sending its batches to the
# coordinator or relay at UP_PORT; sets NAME_PID and NAME_PORT
start_relay() {
    : >"$TMP/$1.ready" # a ready line of an earlier relay of this name must not count
    env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" relay --coordinator "127.0.0.1:$2" \
        --bind 127.0.0.1:0 --relay_id "$1" --subtree "$3" --ready_fd 3 \
        3>"$TMP/$1.ready" >"$TMP/$1.out" 2>"$TMP/$1.err" &
    eval "$1_PID=$!"
    wait_for "port" "$TMP/$1.ready" 20 || fail "relay $1 did not start"
    eval "$1_PORT=$(awk '/^port/ { print $2 }' "$TMP/$1.ready")"
    [ -n "$(eval echo "\$$1_PORT")" ] || fail "relay $1 gave no port"
}

# start_tree JOB: the coordinator's port, relays mid (3 nodes) and leaf (2
# nodes, under mid); nodes 0 and 1 call leaf, node 2 calls mid
start_tree() {
    rm -f "$TMP/stop"
    PORT=$(free_port)
    start_relay mid "$PORT" 3
    start_relay leaf "$mid_PORT" 2
    local r via
    for r in 0 1 2; do
        via=$leaf_PORT
        [ "$r" = 2 ] && via=$mid_PORT
        start_node "$r" --master_addr=127.0.0.1 --master_port="$PORT" --job_id="$1" \
            --worker_num=3 --local_worker_num=1 --node_rank="$r" --cluster_time_out=60 \
            --relay="127.0.0.1:$via" "$TMP/hold.sh"
    done
    poll_status 60 "rel == {0: 'mid', 1: 'mid', 2: 'mid'}" --job_id "$1" ||
        fail "the job did not form through the tree, the middle relay recorded for each node"
}

end_nodes() {
    local r
    touch "$TMP/stop"
    for r in 0 1 2; do
        wait_pid "$(eval echo "\$PID$r")" 60
        expect_code 0 "node $r"
    done
}

# 1. a job through a tree of depth 2, to the end
start_tree tree
end_nodes
for r in leaf mid; do
    kill -TERM "$(eval echo "\$${r}_PID")"
    wait_pid "$(eval echo "\$${r}_PID")" 20
    expect_code 0 "relay $r"
    grep -qE "relaying [1-9][0-9]* calls in [1-9][0-9]* batches" "$TMP/$r.err" ||
        fail "relay $r relayed nothing: $(cat "$TMP/$r.err")"
done
grep -q "no answer from the relay" "$TMP"/node[012].err &&
    fail "a node left its relay in a job without failures"
ok "three nodes joined and ran a job through a tree of two levels of relays"

# 2. the middle relay killed while the job runs: the leaf's nodes and the
#    middle's own call the coordinator themselves, the job ends well
start_tree midkill
kill -9 "$mid_PID"
wait "$mid_PID" 2>/dev/null
for r in 0 1 2; do
    wait_for "no answer from the relay at 127.0.0.1:" "$TMP/node$r.err" 30 ||
        fail "node $r did not leave its relay when the middle relay died"
done
grep -q "refused" "$TMP/leaf.err" && fail "the leaf relay saw a batch refused"
end_nodes
kill -TERM "$leaf_PID"
wait_pid "$leaf_PID" 20
expect_code 0 "the leaf relay, its relay above gone"
ok "the middle relay killed mid-job: its subtree called the coordinator, the job ended well"

# 3. the simulation through relays of relays, at the depth bound and past
SCALE=$BUILD/bin/rdzv_scale
[ -x "$SCALE" ] || fail "no $SCALE"
CODE=0
env -u MSRUN_TOKEN_FILE timeout -k 5 60 "$SCALE" --nodes 2048 --relay 32 --relay_levels 2 >"$TMP/scale.out" \
    2>"$TMP/scale.err" || CODE=$?
[ "$CODE" -eq 0 ] || fail "rdzv_scale --relay_levels 2 exited $CODE: $(tail -3 "$TMP/scale.err")"
grep -q "nodes=2048 .*conns=2 .*mode=relay2" "$TMP/scale.out" ||
    fail "no line for 2,048 nodes through two levels: $(cat "$TMP/scale.out")"
CODE=0
env -u MSRUN_TOKEN_FILE timeout -k 5 60 "$SCALE" --nodes 81 --relay 3 --relay_levels 4 >"$TMP/scale.out" \
    2>"$TMP/scale.err" || CODE=$?
[ "$CODE" -eq 0 ] || fail "rdzv_scale --relay_levels 4 exited $CODE: $(tail -3 "$TMP/scale.err")"
grep -q "nodes=81 .*conns=1 .*mode=relay4" "$TMP/scale.out" ||
    fail "no line for 81 nodes through four levels: $(cat "$TMP/scale.out")"
CODE=0
env -u MSRUN_TOKEN_FILE "$SCALE" --nodes 16 --relay 2 --relay_levels 5 >"$TMP/scale.out" 2>"$TMP/scale.err" || CODE=$?
[ "$CODE" -eq 2 ] && grep -q "relay_levels takes 1 to 4" "$TMP/scale.err" ||
    fail "5 levels of relays were not refused: $CODE $(cat "$TMP/scale.err")"
ok "rdzv_scale: 2,048 nodes through two levels, 81 through four, five refused"

# 4. addresses that are not HOST:PORT: bad input, said so, exit 2
expect_bad() { # WHAT NEEDLE COMMAND...
    local what=$1 needle=$2
    shift 2
    CODE=0
    env MSRUN_TOKEN=tok "$@" >"$TMP/bad.out" 2>"$TMP/bad.err" </dev/null || CODE=$?
    [ "$CODE" -eq 2 ] && grep -q -- "$needle" "$TMP/bad.err" ||
        fail "$what: exit $CODE, $(cat "$TMP/bad.err")"
}
unset MSRUN_TOKEN_FILE
expect_bad "--relay without a port" "--relay=127.0.0.1: is not HOST:PORT" \
    "$MSRUN" --relay 127.0.0.1: --master_addr 127.0.0.1 --master_port 29400 true
expect_bad "a relay's upper relay at port 65536" "--coordinator=127.0.0.1:65536 is not" \
    "$MSRUN" relay --coordinator 127.0.0.1:65536
expect_bad "a relay's --bind without a port" "--bind=127.0.0.1 is not HOST:PORT" \
    "$MSRUN" relay --coordinator 127.0.0.1:65535 --bind 127.0.0.1
ok "a relay's address that is not HOST:PORT: refused, exit 2"
no_leftovers "relays of relays"
