#!/usr/bin/env bash
# The bound on held calls against a real coordinator (tests/integration/
# held_flood.c): 1,000 concurrent fetches of 60,000 indices that wait, from
# one client, are held up to the client's byte bound (64 MiB by default)
# and refused past it naming the bound; the coordinator's memory stays
# within the bound plus a margin; cancelled calls give their charge back.
. "$(dirname "$0")/lib.sh"
FLOOD=$BUILD/tests/held_flood
CLIENT_BYTES=$((64 << 20))

env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" coordinator --bind 127.0.0.1:0 --ready_fd 3 \
    --job_id held --token held-secret --worker_num 2 --local_worker_num 2 --log_level warn \
    3>"$TMP/ready" >"$TMP/coord.out" 2>"$TMP/coord.err" &
COORD=$!
wait_for "port" "$TMP/ready" 20 || fail "the coordinator did not start: $(cat "$TMP/ready")"
PORT=$(awk '/^port/ { print $2 }' "$TMP/ready")

CODE=0
timeout -k 5 150 env MSRUN_TEST_MARKER="$MARKER" "$FLOOD" "127.0.0.1:$PORT" held-secret \
    "$COORD" 1000 60000 "$CLIENT_BYTES" >"$TMP/out" 2>"$TMP/err" || CODE=$?
cat "$TMP/out"
kill "$COORD" 2>/dev/null
wait "$COORD" 2>/dev/null
[ "$CODE" -eq 0 ] || fail "held_flood exited $CODE: $(tail -3 "$TMP/err")"
ok "held calls: 1,000 waiting fetches bounded per client, refused past it, charge refunded"

# The bound from the command line: --held_bytes_max 8M holds 17 fetches
# of 60,000 indices (480,000 bytes each) and refuses the 18th naming 8 MiB.
env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" coordinator --bind 127.0.0.1:0 --ready_fd 3 \
    --job_id held --token held-secret --worker_num 2 --local_worker_num 2 --log_level warn \
    --held_bytes_max 8M 3>"$TMP/ready2" >"$TMP/coord2.out" 2>"$TMP/coord2.err" &
COORD=$!
wait_for "port" "$TMP/ready2" 20 || fail "the coordinator did not start: $(cat "$TMP/ready2")"
PORT=$(awk '/^port/ { print $2 }' "$TMP/ready2")
CODE=0
timeout -k 5 120 env MSRUN_TEST_MARKER="$MARKER" "$FLOOD" "127.0.0.1:$PORT" held-secret \
    "$COORD" 40 60000 $((8 << 20)) >"$TMP/out2" 2>"$TMP/err2" || CODE=$?
kill "$COORD" 2>/dev/null
wait "$COORD" 2>/dev/null
[ "$CODE" -eq 0 ] || fail "--held_bytes_max 8M: held_flood exited $CODE: $(tail -3 "$TMP/err2")"
grep -q "held: 40 fetches of 60000 indices, 23 refused" "$TMP/out2" ||
    fail "--held_bytes_max 8M did not hold exactly 17 of 40: $(head -3 "$TMP/out2")"
ok "--held_bytes_max 8M: 17 of 40 fetches held, the 18th refused naming the bound"

# Each bound at its least value and one under it, on both commands.
for opt in held_calls_max held_bytes_max held_calls_total held_bytes_total; do
    for cmd in "" coordinator; do
        "$MSRUN" $cmd --$opt 0 --help >"$TMP/o" 2>&1 && fail "msrun $cmd --$opt 0 accepted"
        grep -q -- "--$opt" "$TMP/o" || fail "msrun $cmd --$opt 0: no error naming it: $(cat "$TMP/o")"
        "$MSRUN" $cmd --$opt 1 --help >/dev/null 2>&1 || fail "msrun $cmd --$opt 1 refused"
    done
done
ok "the four bounds: 1 accepted, 0 refused, by msrun and msrun coordinator"

# A node's msrun holds its workers' waiting calls to the same bound (the
# node's workers are one client of the coordinator): a worker's fetches of
# entries nobody publishes, held by the proxy, past --held_calls_max 5.
cat >"$TMP/proxy_flood.sh" <<END
#!/bin/sh
exec "$FLOOD" "unix:\$MSR_AGENT" "\$MSR_TOKEN" "\$PPID" 40 1 $((64 << 20))
END
chmod +x "$TMP/proxy_flood.sh"
CODE=0
timeout -k 5 120 env MSRUN_TEST_MARKER="$MARKER" HELD_FLOOD_FIT=5 \
    HELD_FLOOD_REFUSAL="held calls of this node's workers (msrun's proxy): 5 at most" \
    "$MSRUN" --worker_num 1 --held_calls_max 5 "$TMP/proxy_flood.sh" >"$TMP/out3" 2>&1 || CODE=$?
[ "$CODE" -eq 0 ] || fail "the proxy's bound: the job exited $CODE: $(tail -5 "$TMP/out3")"
grep -q "held: 40 fetches of 1 indices, 35 refused" "$TMP/out3" ||
    fail "the proxy did not hold exactly 5 of 40: $(grep held: "$TMP/out3")"
grep -q "second round held 5 again" "$TMP/out3" ||
    fail "the proxy did not give the cancelled calls' charge back: $(tail -3 "$TMP/out3")"
ok "a node's proxy holds 5 of its workers' 40 waiting fetches at --held_calls_max 5"

# msrun hands the bounds to the coordinator it starts (its whole command
# line is in msrun's debug log: the coordinator, a copy of msrun, shows only
# as much of it as msrun's own command line has room for).
JOB_OUT=$TMP/job.out
env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --worker_num 1 --log_level=debug --held_calls_max 7 \
    --held_bytes_total 3M sh -c "echo started; exec sleep 60" >"$JOB_OUT" 2>&1 &
JOB=$!
wait_for started "$JOB_OUT" 30 || fail "the job did not start: $(cat "$JOB_OUT")"
ARGS=$(sed -n 's/.*starting the embedded coordinator: //p' "$JOB_OUT")
kill "$JOB" 2>/dev/null
wait "$JOB" 2>/dev/null
case $ARGS in
*"--held_calls_max 7 "*"--held_bytes_total 3145728"*) ok "msrun passes the bounds to its coordinator" ;;
*) fail "msrun's coordinator was started with: $ARGS" ;;
esac
exit $FAILED
