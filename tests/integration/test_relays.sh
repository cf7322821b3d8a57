#!/usr/bin/env bash
# Relays chosen at launch (--relays, issue 40), with real msruns on
# loopback: the node of every K-th node rank serves its group's relay and
# the group joins through it, as the coordinator records (msrun status);
# a group of exactly K nodes, the last one of fewer, K = 1 and a job below
# auto's threshold; a relay's node that is not up when its group joins
# (they join directly), and one killed after the job formed (its group
# calls the coordinator, the job restarts once the node is back).
. "$(dirname "$0")/lib.sh"
unset MSRUN_MASTER_ADDR MSRUN_MASTER_PORT MSRUN_TOKEN MSRUN_TOKEN_FILE MSRUN_JOB_ID MSRUN_RELAY \
    MSRUN_RELAYS
use_token_file
cat >"$TMP/hold.sh" <<EOS
#!/bin/sh
while [ ! -e "$TMP/stop" ]; do sleep 0.05; done
EOS
chmod +x "$TMP/hold.sh"

# start_job JOB NODES ARGS...: NODES msruns of one worker each (node ranks
# 0 to NODES-1), the coordinator on PORT and the relays above it (PORT + 2
# + group: NODES + 2 consecutive free ports cover any K)
start_job() {
    local job=$1 nodes=$2 r
    shift 2
    rm -f "$TMP/stop"
    PORT=$(free_port --consecutive $((nodes + 2)))
    PORT=${PORT%%$'\n'*}
    for ((r = 0; r < nodes; r++)); do
        start_node "$r" --master_addr=127.0.0.1 --master_port="$PORT" --job_id="$job" \
            --local_worker_num=1 --node_rank="$r" --cluster_time_out=60 "$@" "$TMP/hold.sh"
    done
}

# end_job NODES [DEAD]: stops the workers; every node but DEAD exits 0
end_job() {
    local r
    touch "$TMP/stop"
    for ((r = 0; r < $1; r++)); do
        [ "$r" = "${2:-}" ] && continue
        wait_pid "$(eval echo "\$PID$r")" 60
        expect_code 0 "node $r"
    done
}

# 1. K = 2 over 5 nodes: groups {0,1} {2,3} {4}; each node's relay is
#    relay-(rank / 2), served by its group's first node
start_job k2 5 --worker_num=5 --relays=2
poll_status 60 "rel == {0: 'relay-0', 1: 'relay-0', 2: 'relay-1', 3: 'relay-1', 4: 'relay-2'}" --job_id k2 ||
    fail "the nodes did not join through their groups' relays"
status --job_id k2
expect_in "joined through relay relay-1" "$TMP/st" "msrun status's text"
grep -q "serving relay-1 for nodes 2 to 3 on port $((PORT + 3))" "$TMP/node2.err" ||
    fail "node 2 does not serve relay-1 on master_port + 3"
grep -q "serving relay-2 for nodes 4 to 4" "$TMP/node4.err" || fail "node 4 does not serve relay-2"
grep -q "serving" "$TMP/node1.err" "$TMP/node3.err" && fail "a group's second node serves a relay"
end_job 5
grep -qE "relay-1: stopping after relaying [1-9][0-9]* calls" "$TMP/node2.err" ||
    fail "relay-1 relayed nothing"
ok "--relays 2 over 5 nodes: groups of 2, 2 and 1 joined through their relays"

# 2. K = 1: every node its own relay; auto below 1,024 nodes: none
start_job k1 2 --worker_num=2 --relays=1
poll_status 60 "rel == {0: 'relay-0', 1: 'relay-1'}" --job_id k1 ||
    fail "--relays 1: each node through its own relay"
end_job 2
start_job small 2 --worker_num=2
poll_status 60 "rel == {0: '', 1: ''}" --job_id small || fail "a small job has no relays by default"
grep -q "serving" "$TMP/node0.err" "$TMP/node1.err" &&
    fail "a small job serves relays"
end_job 2
ok "--relays 1: a relay per node; auto: none in a job of 2 nodes"

# 3. a relay not up when its group joins: node 3 joins directly (after its
#    join through the relay times out); its relay's node 2 comes later
rm -f "$TMP/stop"
PORT=$(free_port --consecutive 4)
PORT=${PORT%%$'\n'*}
for r in 0 1 3; do
    start_node "$r" --master_addr=127.0.0.1 --master_port="$PORT" --job_id=late \
        --local_worker_num=1 --node_rank="$r" --cluster_time_out=60 --worker_num=4 --relays=2 \
        "$TMP/hold.sh"
done
wait_for "no answer from relay-1 at 127.0.0.1:$((PORT + 3)) " "$TMP/node3.err" 30 ||
    fail "node 3 did not give up on its relay, which is not up"
start_node 2 --master_addr=127.0.0.1 --master_port="$PORT" --job_id=late \
    --local_worker_num=1 --node_rank=2 --cluster_time_out=60 --worker_num=4 --relays=2 \
    "$TMP/hold.sh"
poll_status 60 "rel == {0: 'relay-0', 1: 'relay-0', 2: 'relay-1', 3: ''}" --job_id late ||
    fail "node 3 did not join directly, or node 2 not through its relay"
end_job 4
ok "a relay not up: its group's node joined the coordinator directly"

# 4. a relay's node killed after the job formed: node 3 calls the
#    coordinator itself; node 2 is lost and the job restarts (the fault
#    model of a fixed size: it waits for the node to come back); node 2
#    started again serves relay-1 again and the job runs on, node 3 shown
#    calling directly (its heartbeats go to the coordinator now)
start_job dies 4 --worker_num=4 --max_restarts=3 --relays=2 --node_timeout=2
poll_status 60 "rel == {0: 'relay-0', 1: 'relay-0', 2: 'relay-1', 3: 'relay-1'}" --job_id dies ||
    fail "the job did not form through its relays"
kill -9 "$PID2"
wait "$PID2" 2>/dev/null
wait_for "no answer from relay-1 at 127.0.0.1:$((PORT + 3)) " "$TMP/node3.err" 30 ||
    fail "node 3 did not notice its relay die"
poll_status 60 "j['generation'] >= 1" --job_id dies || fail "the job did not restart without node 2"
start_node 2 --master_addr=127.0.0.1 --master_port="$PORT" --job_id=dies --local_worker_num=1 \
    --node_rank=2 --cluster_time_out=60 --worker_num=4 --max_restarts=3 --relays=2 \
    --node_timeout=2 "$TMP/hold.sh"
poll_status 60 "j['generation'] >= 1 and rel == {0: 'relay-0', 1: 'relay-0', 2: 'relay-1', 3: ''}" --job_id dies ||
    fail "the job did not run again with node 2 back"
end_job 4
ok "a relay's node killed: its group called the coordinator, the job restarted with it back"
no_leftovers "relays"
