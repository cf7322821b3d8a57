#!/usr/bin/env bash
# Relays with the real msrun (issue 40): two nodes of two workers join a job
# through `msrun relay` and run it to the end; a relay killed while its
# nodes' job runs: the nodes go on calling the coordinator directly, and
# the job ends well; a node behind a relay killed: it is found lost as a
# direct node is, and the job (no restarts) fails naming it; the relay
# dead when the workers exit: their exit reports reach the coordinator
# directly; libmsrun workers' allgathers and barriers forwarded by the
# relay, every one the coordinator served.
. "$(dirname "$0")/lib.sh"
unset MSRUN_MASTER_ADDR MSRUN_MASTER_PORT MSRUN_TOKEN MSRUN_TOKEN_FILE MSRUN_JOB_ID MSRUN_RELAY
use_token_file

# start_relay NAME COORD_PORT: a relay for the coordinator at COORD_PORT;
# RELAY_PID and RELAY_PORT are set
start_relay() {
    env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" relay --coordinator "127.0.0.1:$2" \
        --bind 127.0.0.1:0 --relay_id "$1" --subtree 2 --ready_fd 3 \
        3>"$TMP/$1.ready" >"$TMP/$1.out" 2>"$TMP/$1.err" &
    RELAY_PID=$!
    wait_for "port" "$TMP/$1.ready" 20 || fail "the relay did not start"
    RELAY_PORT=$(awk '/^port/ { print $2 }' "$TMP/$1.ready")
}

# 1. a job through a relay: both nodes' joins, heartbeats, exit reports and
#    leaves relayed
port=$(free_port)
start_relay r1 "$port"
common=(--master_addr=127.0.0.1 --master_port="$port" --worker_num=4 --local_worker_num=2
    --job_id=relayed --cluster_time_out=60 --relay="127.0.0.1:$RELAY_PORT")
start_node 0 "${common[@]}" true
start_node 1 "${common[@]}" true
wait_pid "$PID0" 60
expect_code 0 "node 0 through the relay"
wait_pid "$PID1" 60
expect_code 0 "node 1 through the relay"
kill -TERM "$RELAY_PID"
wait_pid "$RELAY_PID" 20
expect_code 0 "the relay"
grep -qE "relaying [1-9][0-9]* calls in [1-9][0-9]* batches" "$TMP/r1.err" ||
    fail "the relay relayed nothing: $(cat "$TMP/r1.err")"
# the workers' four exit reports and both leaves went through it too
grep -qE "\(Join [1-9][0-9]*, Heartbeat [1-9][0-9]*, Report ([4-9]|[1-9][0-9]+), Leave 2, " \
    "$TMP/r1.err" || fail "the exits and leaves did not go through the relay: $(cat "$TMP/r1.err")"
grep -q "no answer from the relay" "$TMP/node0.err" "$TMP/node1.err" &&
    fail "a node left the relay in a job without failures"
ok "two nodes joined and ran a job through a relay"

# 2. the relay killed while the job runs: the nodes call the coordinator
#    themselves and the job ends well
port=$(free_port)
start_relay r2 "$port"
cat >"$TMP/hold.sh" <<EOS
#!/bin/sh
while [ ! -e "$TMP/stop" ]; do sleep 0.05; done
EOS
chmod +x "$TMP/hold.sh"
common=(--master_addr=127.0.0.1 --master_port="$port" --worker_num=4 --local_worker_num=2
    --job_id=relaykill --cluster_time_out=60 --relay="127.0.0.1:$RELAY_PORT")
start_node 0 "${common[@]}" "$TMP/hold.sh"
start_node 1 "${common[@]}" "$TMP/hold.sh"
for ((i = 0; i < 400; i++)); do # the job runs: four workers started
    [ "$(pgrep -f -c "^/bin/sh $TMP/hold.sh")" = 4 ] && break
    sleep 0.05
done
[ "$(pgrep -f -c "^/bin/sh $TMP/hold.sh")" = 4 ] || fail "the job did not start its 4 workers"
kill -9 "$RELAY_PID"
wait_for "no answer from the relay at 127.0.0.1:$RELAY_PORT " "$TMP/node0.err" 30 ||
    fail "node 0 did not notice its relay die"
touch "$TMP/stop"
wait_pid "$PID0" 60
expect_code 0 "node 0 after its relay died"
wait_pid "$PID1" 60
expect_code 0 "node 1 after its relay died"
ok "a relay killed mid-job: its nodes called the coordinator and the job ended well"

# 3. a node behind the relay killed while the job runs: lost after the
#    node timeout (here 2 s; plus up to a heartbeat interval, which its
#    relay's held batch keeps), and the job fails saying so
rm -f "$TMP/stop"
port=$(free_port)
start_relay r3 "$port"
common=(--master_addr=127.0.0.1 --master_port="$port" --worker_num=4 --local_worker_num=2
    --job_id=relaylost --cluster_time_out=60 --node_timeout=2 --max_restarts=0
    --relay="127.0.0.1:$RELAY_PORT")
start_node 0 "${common[@]}" "$TMP/hold.sh"
start_node 1 "${common[@]}" "$TMP/hold.sh"
for ((i = 0; i < 400; i++)); do
    [ "$(pgrep -f -c "^/bin/sh $TMP/hold.sh")" = 4 ] && break
    sleep 0.05
done
[ "$(pgrep -f -c "^/bin/sh $TMP/hold.sh")" = 4 ] || fail "the job did not start its 4 workers"
# the node whose msrun does not run the coordinator dies
read -r host _ < <(coordinator_of relaylost "$PID0" "$PID1") ||
    fail "neither node runs the coordinator"
if [ "$host" = "$PID0" ]; then live=0 dead=$PID1; else live=1 dead=$PID0; fi
kill -9 "$dead"
wait_pid "$host" 30
[ "$CODE" -ne 0 ] || fail "the live node ended well though the other was lost"
grep -q "was lost: no heartbeat" "$TMP/node$live.err" ||
    fail "the live node does not say the other was lost: $(tail -3 "$TMP/node$live.err")"
touch "$TMP/stop"
kill -TERM "$RELAY_PID"
wait_pid "$RELAY_PID" 20
ok "a node behind a relay killed: found lost, the job failed naming it"

# 4. the relay dead (stopped: it holds its connections and answers nothing)
#    when the workers exit: their exit reports, sent to it, find no answer
#    and go to the coordinator, which fails the job (no restarts) on them.
#    A heartbeat through it waits longer than a report (the interval plus
#    5 s against 5 s), so the reports are the calls that find it dead.
rm -f "$TMP/stop"
port=$(free_port)
start_relay r4 "$port"
cat >"$TMP/exit3.sh" <<EOS
#!/bin/sh
while [ ! -e "$TMP/stop" ]; do sleep 0.05; done
exit 3
EOS
chmod +x "$TMP/exit3.sh"
common=(--master_addr=127.0.0.1 --master_port="$port" --worker_num=4 --local_worker_num=2
    --job_id=relayexit --cluster_time_out=60 --max_restarts=0 --heartbeat_interval=4
    --node_timeout=60 --relay="127.0.0.1:$RELAY_PORT")
start_node 0 "${common[@]}" "$TMP/exit3.sh"
start_node 1 "${common[@]}" "$TMP/exit3.sh"
for ((i = 0; i < 400; i++)); do
    [ "$(pgrep -f -c "^/bin/sh $TMP/exit3.sh")" = 4 ] && break
    sleep 0.05
done
[ "$(pgrep -f -c "^/bin/sh $TMP/exit3.sh")" = 4 ] || fail "the job did not start its 4 workers"
kill -STOP "$RELAY_PID"
touch "$TMP/stop"
# the job's code is the rank's (the coordinator's record of its exit
# report; a worker seen gone by heartbeats alone would give 1)
wait_pid "$PID0" 60
[ "$CODE" -eq 3 ] || fail "node 0 ended with $CODE, not the workers' 3"
wait_pid "$PID1" 60
[ "$CODE" -eq 3 ] || fail "node 1 ended with $CODE, not the workers' 3"
# (a report is the first call to find it dead, unless a heartbeat sent
# just before the stop times out first: then the reports go direct at once)
grep -q "no answer from the relay" "$TMP/node0.err" "$TMP/node1.err" ||
    fail "no call fell back to the coordinator: $(cat "$TMP/node0.err" "$TMP/node1.err")"
grep -q "exited with code 3" "$TMP/node0.err" "$TMP/node1.err" ||
    fail "the job's end does not name the exit code 3: $(tail -5 "$TMP/node0.err")"
kill -9 "$RELAY_PID"
wait_pid "$RELAY_PID" 20
ok "a dead relay when workers exit: their exit reports reached the coordinator directly"

# 5. libmsrun workers under the relay: their nodes' allgathers and barriers
#    (the proxies' upstream calls) go through it, forwarded one by one: it
#    forwards at least as many store calls as the coordinator served
#    Allgather and Barrier calls (rank 0 asks it directly at the end)
port=$(free_port)
start_relay r5 "$port"
common=(--master_addr=127.0.0.1 --master_port="$port" --worker_num=4 --local_worker_num=2
    --job_id=relaystore --cluster_time_out=60 --relay="127.0.0.1:$RELAY_PORT")
start_node 0 "${common[@]}" "$BUILD/tests/batch_worker"
start_node 1 "${common[@]}" "$BUILD/tests/batch_worker"
wait_pid "$PID0" 60
expect_code 0 "node 0's store calls through the relay"
wait_pid "$PID1" 60
expect_code 0 "node 1's store calls through the relay"
kill -TERM "$RELAY_PID"
wait_pid "$RELAY_PID" 20
expect_code 0 "the relay"
read -r ag ba < <(sed -n 's/.*COUNTS allgather=\([0-9]*\) barrier=\([0-9]*\).*/\1 \2/p' \
    "$TMP/node0.out" "$TMP/node1.out")
[ -n "$ag" ] && [ "$ag" -gt 0 ] && [ "$ba" -gt 0 ] ||
    fail "no counts from rank 0: $(cat "$TMP/node0.out" "$TMP/node1.out")"
fwd=$(sed -n 's/.*forwarded \([0-9]*\) store calls.*/\1/p' "$TMP/r5.err")
[ -n "$fwd" ] && [ "$fwd" -ge $((ag + ba)) ] ||
    fail "the relay forwarded ${fwd:-no} store calls, the coordinator served $ag allgathers and $ba barriers: $(cat "$TMP/r5.err")"
grep -q "no answer from the relay" "$TMP/node0.err" "$TMP/node1.err" &&
    fail "a node left the relay in a job without failures"
ok "libmsrun workers' store calls through a relay: $fwd forwarded, $ag allgathers and $ba barriers served"
