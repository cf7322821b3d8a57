#!/usr/bin/env bash
# Relays against a real coordinator over real sockets (bench/rdzv/
# rdzv_scale --relay): 2,048 simulated nodes of 8 ranks join through relays
# whose batches are at exactly their bound (1,024 nodes), then 1,025 nodes
# through relays of 16 (the last relay has one node); every node must get a
# rank of its own and be told the job runs (rdzv_scale checks both and
# exits non-zero otherwise), and their store exchange, forwarded over the
# relays' connections, leaves the coordinator holding those alone. A relay
# of 1,025 nodes is refused up front.
. "$(dirname "$0")/lib.sh"
SCALE=$BUILD/bin/rdzv_scale
[ -x "$SCALE" ] || fail "no $SCALE"

CODE=0
timeout -k 5 50 "$SCALE" --nodes 2048 --relay 1024 >"$TMP/out" 2>"$TMP/err" || CODE=$?
cat "$TMP/out"
[ "$CODE" -eq 0 ] || fail "rdzv_scale --relay 1024 exited $CODE: $(tail -3 "$TMP/err")"
grep -q "nodes=2048 .*conns=2 .*mode=relay" "$TMP/out" || fail "no relay line for 2,048 nodes"
# two connections (and its listening socket), not 2,048
sockets=$(sed -n 's/.*coord_sockets=\([0-9]*\).*/\1/p' "$TMP/out")
[ -n "$sockets" ] && [ "$sockets" -lt 16 ] ||
    fail "the coordinator held ${sockets:-?} sockets after the exchange through two relays"
ok "2,048 nodes joined and exchanged through two relays at the batch bound"

CODE=0
timeout -k 5 50 "$SCALE" --nodes 1025 --relay 16 >"$TMP/out" 2>"$TMP/err" || CODE=$?
[ "$CODE" -eq 0 ] || fail "rdzv_scale --relay 16 exited $CODE: $(tail -3 "$TMP/err")"
grep -q "nodes=1025 .*conns=65 .*mode=relay" "$TMP/out" || fail "no relay line for 1,025 nodes"
ok "1,025 nodes joined through 65 relays"

CODE=0
"$SCALE" --nodes 16 --relay 1025 >"$TMP/out" 2>"$TMP/err" || CODE=$?
[ "$CODE" -eq 2 ] && grep -q "relay takes 1 to 1024" "$TMP/err" ||
    fail "a relay of 1,025 nodes was not refused: $CODE $(cat "$TMP/err")"
ok "a relay past the batch bound refused"
