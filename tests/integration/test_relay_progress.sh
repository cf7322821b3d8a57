#!/usr/bin/env bash
# Progress through a relay (issue 40): two nodes of two ranks behind
# `msrun relay` report their steps (printed metric lines); the relay
# carries the nodes' progress to the coordinator, which shows each rank's
# step (/api/job); the relay killed mid-job: each node says its progress
# goes to the coordinator now, and every rank's step still advances there;
# the job ends well; the same through the relays of --relays.
. "$(dirname "$0")/lib.sh"
unset MSRUN_MASTER_ADDR MSRUN_MASTER_PORT MSRUN_TOKEN MSRUN_TOKEN_FILE MSRUN_JOB_ID MSRUN_RELAY \
    MSRUN_RELAYS
use_token_file
TOKEN=$(cat "$TMP/token")

cat >"$TMP/steps.sh" <<EOS
#!/bin/sh
i=0
while [ ! -e "$TMP/stop" ]; do
    echo "msrun:metric step=\$i loss=1.5"
    i=\$((i + 1))
    sleep 0.05
done
EOS
chmod +x "$TMP/steps.sh"

# steps_over MIN...: /api/job shows rank r at a step above MIN r (the
# coordinator's dashboard, on either node's msrun); 20 s at most
steps_over() {
    local i
    for ((i = 0; i < 80; i++)); do
        if [ "$(http_get "$DPORT" /api/job "$TMP/job.json" "Authorization: Bearer $TOKEN" |
            cut -d' ' -f1)" = 200 ] &&
            [ "$(json "$TMP/job.json" "len(j['ranks']) == 4 and
                all(r['step'] > m for r, m in zip(sorted(j['ranks'], key=lambda r: r['rank']),
                                                 [$(IFS=,; echo "$*")]))" 2>/dev/null)" = True ]; then
            return 0
        fi
        sleep 0.25
    done
    return 1
}

# the ranks' steps now, by rank, as "S0 S1 S2 S3"
steps_now() {
    json "$TMP/job.json" "' '.join(str(r['step']) for r in sorted(j['ranks'], key=lambda r: r['rank']))"
}

port=$(free_port --consecutive 2)
port=${port%%$'\n'*}
DPORT=$((port + 1))
env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" relay --coordinator "127.0.0.1:$port" \
    --bind 127.0.0.1:0 --relay_id r1 --subtree 2 --ready_fd 3 \
    3>"$TMP/r1.ready" >"$TMP/r1.out" 2>"$TMP/r1.err" &
RELAY_PID=$!
wait_for "port" "$TMP/r1.ready" 20 || fail "the relay did not start"
RELAY_PORT=$(awk '/^port/ { print $2 }' "$TMP/r1.ready")
common=(--master_addr=127.0.0.1 --master_port="$port" --worker_num=4 --local_worker_num=2
    --job_id=relayprog --cluster_time_out=60 --dashboard_port="$DPORT"
    --relay="127.0.0.1:$RELAY_PORT")
start_node 0 "${common[@]}" "$TMP/steps.sh"
start_node 1 "${common[@]}" "$TMP/steps.sh"

# 1. every rank's steps reach the coordinator through the relay
steps_over 10 10 10 10 || fail "the ranks' steps through the relay: $(cat "$TMP/job.json")"
grep -q "no answer from the relay" "$TMP/node0.err" "$TMP/node1.err" &&
    fail "a node left the relay in a job without failures"
ok "the coordinator shows each rank's steps, reported through the relay"

# 2. the relay killed: each node's progress goes to the coordinator, and
#    every rank's step still advances there
kill -9 "$RELAY_PID"
wait "$RELAY_PID" 2>/dev/null
for n in 0 1; do
    wait_for "no answer from the relay at 127.0.0.1:$RELAY_PORT to the node's progress" \
        "$TMP/node$n.err" 30 || fail "node $n did not send its progress elsewhere"
done
read -r -a seen < <(steps_now)
steps_over "${seen[@]}" || fail "no steps after the relay died (were ${seen[*]}): $(cat "$TMP/job.json")"
touch "$TMP/stop"
for n in 0 1; do
    wait_pid "$(eval echo "\$PID$n")" 60
    expect_code 0 "node $n after its relay died"
done
ok "the relay killed mid-job: progress went on by the coordinator, the job ended well"

# 3. --relays 2 over 4 nodes: each group's progress through the relay its
#    first node serves; the job ends well (the relays stop with the nodes)
rm -f "$TMP/stop"
port=$(free_port --consecutive 5)
port=${port%%$'\n'*}
DPORT=$((port + 4))
for r in 0 1 2 3; do
    start_node "$r" --master_addr=127.0.0.1 --master_port="$port" --job_id=groups \
        --worker_num=4 --local_worker_num=1 --node_rank="$r" --cluster_time_out=60 --relays=2 \
        --dashboard_port="$DPORT" "$TMP/steps.sh"
done
steps_over 10 10 10 10 || fail "the ranks' steps through --relays: $(cat "$TMP/job.json")"
grep -q "no answer from" "$TMP"/node[0-3].err && fail "a node left its relay in a job without failures"
touch "$TMP/stop"
for n in 0 1 2 3; do
    wait_pid "$(eval echo "\$PID$n")" 60
    expect_code 0 "node $n of --relays 2"
done
ok "--relays 2: each group's progress through its relay, the job ended well"
no_leftovers "relay progress"
