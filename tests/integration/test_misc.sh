#!/bin/bash
# msrun status, --standalone, --rdzv_endpoint, --join.
. "$(dirname "$0")/lib.sh"
use_token_file


# msrun status against a running job
port=$(free_port)
# A worker that says it is up and runs until $TMP/stop appears (60 s at
# most): the job must still run when msrun status asks, however slow the
# machine (a worker that slept 3 s could be done by then).
cat >"$TMP/hold.sh" <<SH
#!/bin/sh
echo "rank \$RANK up"
i=0
while [ ! -e "$TMP/stop" ] && [ \$i -lt 600 ]; do sleep 0.1; i=\$((i + 1)); done
SH
chmod +x "$TMP/hold.sh"
start_msrun --master_addr=127.0.0.1 --master_port="$port" --worker_num=2 --job_id=statusjob \
    "$TMP/hold.sh"
wait_count "up" "$TMP/out" 2 20 || fail "job started"
timeout 20 "$MSRUN" status --master_addr=127.0.0.1 --master_port="$port" --job_id=statusjob \
    >"$TMP/status" 2>&1 || { cat "$TMP/status"; fail "msrun status"; }
grep -q "job statusjob: running, generation 0, 1 nodes, 2 workers, restarts 0 of 0" "$TMP/status" ||
    { cat "$TMP/status"; fail "status line"; }
grep -qE "node 0 +127.0.0.1 +pid [0-9]+ +2 workers +running" "$TMP/status" || fail "node line"
CODE=0
timeout 20 "$MSRUN" status --master_addr=127.0.0.1 --master_port="$port" --token=wrong \
    >"$TMP/status" 2>&1 || CODE=$?
[ "$CODE" = 1 ] && grep -q "token" "$TMP/status" || fail "status with a wrong token is refused"
touch "$TMP/stop"
wait_pid "$BG_PID" 30
expect_code 0 "status job"
ok "msrun status shows the job and its nodes; a wrong token is refused"


# --standalone ignores master_addr/port; --rdzv_endpoint sets both; --join is accepted
run_msrun --standalone --master_addr=10.255.255.1 --master_port=1 --nproc-per-node=2 \
    --join=true "$WORKER" env
expect_code 0 "standalone"
expect_in "ENV 1 MSR_COORDINATOR=127.0.0.1:" "$TMP/out" "standalone on loopback"
port=$(free_port)
run_msrun --rdzv_endpoint="127.0.0.1:$port" --worker_num=2 "$WORKER" env
expect_code 0 "rdzv_endpoint"
expect_in "ENV 0 MSR_COORDINATOR=127.0.0.1:$port" "$TMP/out" "rdzv_endpoint"
ok "--standalone, --rdzv_endpoint, --join"
no_leftovers "misc"
