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
exit $FAILED
