#!/usr/bin/env bash
# The store's limits against a real coordinator (tests/integration/
# store_flood.c): 1 GiB of attempted writes keep its memory within
# --store_bytes_max plus a margin, over-limit writes are refused naming the
# limit while small writes go on; tiny requests with huge barrier and
# allgather counts are refused; expired waits leave nothing behind. The
# limits are given through the environment (MSRUN_STORE_*).
. "$(dirname "$0")/lib.sh"
FLOOD=$BUILD/tests/store_flood
VALUE_MAX=$((8 << 20))
BYTES_MAX=$((64 << 20))

env MSRUN_TEST_MARKER="$MARKER" MSRUN_STORE_VALUE_MAX=8M MSRUN_STORE_BYTES_MAX=64M \
    MSRUN_STORE_KEYS_MAX=1000 "$MSRUN" coordinator --bind 127.0.0.1:0 --ready_fd 3 \
    --job_id flood --token flood-secret --worker_num 2 --local_worker_num 2 --log_level warn \
    3>"$TMP/ready" >"$TMP/coord.out" 2>"$TMP/coord.err" &
COORD=$!
wait_for "port" "$TMP/ready" 20 || fail "the coordinator did not start: $(cat "$TMP/ready")"
PORT=$(awk '/^port/ { print $2 }' "$TMP/ready")

CODE=0
timeout -k 5 150 env MSRUN_TEST_MARKER="$MARKER" "$FLOOD" "127.0.0.1:$PORT" flood-secret \
    "$COORD" "$VALUE_MAX" "$BYTES_MAX" >"$TMP/out" 2>"$TMP/err" || CODE=$?
cat "$TMP/out"
kill "$COORD" 2>/dev/null
wait "$COORD" 2>/dev/null
[ "$CODE" -eq 0 ] || fail "store_flood exited $CODE"
ok "store limits: 1 GiB attempted, memory bounded, huge counts refused, expired waits freed"
exit $FAILED
