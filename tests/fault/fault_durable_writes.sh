#!/bin/bash
# An acknowledged write is a durable write: a client streams Sets and Adds at
# a standalone coordinator with a state file; the coordinator is killed with
# SIGKILL at random points 20 times and restarted on the same file each
# time; after recovery every acknowledged Set is there and the counter
# equals the acknowledged Adds (each applied once, retries included). The
# restarts alternate between --state_sync disk and process (what msrun's
# embedded coordinator uses): a kill of the process must lose nothing in
# either.
. "$MSRUN_SOURCE/tests/integration/lib.sh"
WRITER=$BUILD/tests/durable_writer
KILLS=${DURABLE_KILLS:-20}
port=$(free_port)
TOKEN="durable-$RANDOM$RANDOM"

start_coord() { # $1: the --state_sync kind
    env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" coordinator --bind "127.0.0.1:$port" \
        --token "$TOKEN" --job_id durable --worker_num 1 --local_worker_num 1 --max_restarts 0 \
        --state_file "$TMP/state" --state_sync "${1:-disk}" --log_level warn 2>>"$TMP/coord.err" &
    COORD=$!
}

acks() { cat "$TMP/w/sets" "$TMP/w/adds" 2>/dev/null | grep -vc '^?'; }

mkdir -p "$TMP/w"
start_coord
export MSR_COORDINATOR="127.0.0.1:$port" MSR_TOKEN="$TOKEN" MSR_WORLD_SIZE=1 MSR_RANK=0 \
    MSR_GENERATION=0 MSR_CONNECT_TIMEOUT=20 MSR_TIMEOUT=30
env MSRUN_TEST_MARKER="$MARKER" "$WRITER" write "$TMP/w" >"$TMP/out" 2>"$TMP/err" &
WRITER_PID=$!
streaming=0
for ((k = 1; k <= KILLS; k++)); do
    # kill while writes stream (once the client is back: new answers, within
    # 20 s, a deadline: the client's reconnect backs off, and took up to 4 s
    # on a loaded machine), at a random moment
    before=$(acks)
    for ((i = 0; i < 400 && $(acks) <= before; i++)); do sleep 0.05; done
    [ "$(acks)" -gt "$before" ] && streaming=$((streaming + 1))
    sleep "$(python3 -c 'import random; print("%.3f" % random.uniform(0, 0.08))')"
    kill -9 "$COORD"
    wait "$COORD" 2>/dev/null
    kill -0 "$WRITER_PID" 2>/dev/null || fail "the writer died"
    start_coord "$( ((k % 2)) && echo process || echo disk)"
done
before=$(acks)
for ((i = 0; i < 400 && $(acks) <= before; i++)); do sleep 0.05; done
[ "$(acks)" -gt "$before" ] || fail "no write acknowledged after the last restart"
[ "$streaming" -ge $((KILLS / 2)) ] || fail "only $streaming of $KILLS kills came while writes streamed"
touch "$TMP/w/stop"
wait_pid "$WRITER_PID" 60
expect_code 0 "the writer"
CODE=0
env MSRUN_TEST_MARKER="$MARKER" "$WRITER" check "$TMP/w" >"$TMP/out" 2>"$TMP/err" || CODE=$?
cat "$TMP/out"
expect_code 0 "the check after $KILLS kills"
kill "$COORD" 2>/dev/null
wait_pid "$COORD" 20
no_leftovers "durable writes"
ok "$KILLS kill -9 of the coordinator ($streaming while writes streamed): every acknowledged write kept, each Add once"
