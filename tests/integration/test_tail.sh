#!/bin/bash
# A rank's last output lines on request (docs/observe.md, /api/output): a
# job on two nodes whose workers print known lines; the dashboard on node 0
# fetches the lines of a rank of node 1 through node 1's heartbeat,
# bounded, escaped, newer than the request; the token is needed; a rank
# out of range is 404; a rank whose node is gone gets its last lines known.
. "$(dirname "$0")/lib.sh"

TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
export MSRUN_TOKEN=$TOKEN
PORT=$(free_port)

# get PATH OUT [HEADER...]: GETs the dashboard's PATH into OUT; prints the status.
get() {
    local s
    s=$(http_get "$PORT" "$@")
    echo "${s%% *}"
}

# output RANK SECONDS: polls /api/output?rank=RANK while it answers 202;
# the body in $TMP/o.json, the first status in FIRST, the last in LAST.
output() {
    local i
    FIRST=
    for ((i = 0; i < $2 * 10; i++)); do
        LAST=$(get "/api/output?rank=$1" "$TMP/o.json" "Authorization: Bearer $TOKEN")
        [ -z "$FIRST" ] && FIRST=$LAST
        [ "$LAST" = 202 ] || return 0
        sleep 0.1
    done
}

cat >"$TMP/worker.sh" <<'SH'
#!/bin/bash
# 70 numbered lines, one on stderr, a binary one, a long one, the last;
# "more" once $1.more exists; then waits for $1.end. msrun reads stdout and
# stderr apart and keeps the lines in the order it read them: before each
# change of stream the worker waits (30 s at most) until the test has seen
# msrun show what came before ($1.err, $1.bin).
hold() {
    local i
    for ((i = 0; i < 600; i++)); do [ -e "$1" ] && return; sleep 0.05; done
}
for ((i = 0; i < 70; i++)); do echo "rank $RANK line $i"; done
hold "$1.err"
echo "rank $RANK on stderr" >&2
hold "$1.bin"
printf 'rank %s bin \001\377 end\n' "$RANK"
printf "rank $RANK long %0990d\n" 0
echo "rank $RANK last"
for ((i = 0; i < 600; i++)); do
    [ -e "$1.end" ] && exit 0
    if [ -e "$1.more" ] && [ ! -e "$1.more.$RANK" ]; then
        echo "rank $RANK more"
        touch "$1.more.$RANK"
    fi
    sleep 0.05
done
SH
chmod +x "$TMP/worker.sh"

mport=$(free_port)
common=(--master_addr=127.0.0.1 --master_port="$mport" --worker_num=4 --local_worker_num=2
    --max_restarts=1 --dashboard_port="$PORT")
for n in 1 0; do
    env MSRUN_TEST_MARKER="$MARKER" timeout -k 5 60 "$MSRUN" "${common[@]}" --node_rank=$n \
        "$TMP/worker.sh" "$TMP/p" >"$TMP/n$n.out" 2>"$TMP/n$n.err" &
    eval "NPID$n=$!"
done
# shown PATTERN STREAM: waits until each rank's line "rank R PATTERN" is on
# its node's msrun's STREAM (out or err): msrun keeps a line for
# /api/output before it writes it there
shown() {
    local r
    for r in 0 1 2 3; do
        wait_for "^\[node $((r / 2)) rank $r\] rank $r $1\$" "$TMP/n$((r / 2)).$2" 30 ||
            fail "rank $r's '$1' is not shown: $(cat "$TMP/n0.err" "$TMP/n1.err")"
    done
}
shown "line 69" out
touch "$TMP/p.err"
shown "on stderr" err
touch "$TMP/p.bin"
shown "last" out

[ "$(get "/api/output?rank=3" "$TMP/o.json")" = 401 ] || fail "401 without the token"
[ "$(get "/api/output?rank=3" "$TMP/o.json" "Authorization: Bearer nope")" = 401 ] ||
    fail "401 with a wrong token"
[ "$(get "/api/output?rank=4" "$TMP/o.json" "Authorization: Bearer $TOKEN")" = 404 ] ||
    fail "404 for rank 4 of 4: $(cat "$TMP/o.json")"
json "$TMP/o.json" "'world size 4' in j['error']" | grep -qx True || fail "the 404 says why"
# a rank of 9 digits, the most, is read (and is no rank of this job)
[ "$(get "/api/output?rank=999999999" "$TMP/o.json" "Authorization: Bearer $TOKEN")" = 404 ] ||
    fail "404 for rank 999999999: $(cat "$TMP/o.json")"
for bad in "rank=x" "rank=-1" "rank=" "" "rank=1234567890"; do
    [ "$(get "/api/output?$bad" "$TMP/o.json" "Authorization: Bearer $TOKEN")" = 400 ] ||
        fail "400 for '$bad'"
done
ok "401 without the token, 404 for a rank out of range, 400 for a bad argument"

# the lines are newer than the ask: younger than the whole poll, measured
t0=$(date +%s.%N)
output 3 10
t1=$(date +%s.%N)
[ "$FIRST" = 202 ] && [ "$LAST" = 200 ] || fail "202 then 200: $FIRST $LAST $(cat "$TMP/o.json")"
json "$TMP/o.json" "j['rank'] == 3 and j['node'] == 1 and 'stale' not in j and
    j['total_lines'] == 74 and len(j['lines']) == 64 and
    j['lines'][:2] == ['rank 3 line 10', 'rank 3 line 11'] and j['lines'][59] == 'rank 3 line 69' and
    j['lines'][60] == 'rank 3 on stderr' and j['lines'][61] == 'rank 3 bin \x01\ufffd end' and
    j['lines'][62] == 'rank 3 long ' + '0' * 388 and j['lines'][63] == 'rank 3 last' and
    j['age_s'] <= $t1 - $t0" | grep -qx True || fail "rank 3's lines: $(cat "$TMP/o.json")"
ok "a rank of node 1: its last 64 lines, both streams, long lines cut, bytes escaped"

touch "$TMP/p.more"
shown "more" out
output 3 10
[ "$FIRST" = 202 ] && [ "$LAST" = 200 ] || fail "asked again: $FIRST $LAST"
json "$TMP/o.json" "j['lines'][-1] == 'rank 3 more' and j['lines'][-2] == 'rank 3 last' and
    j['total_lines'] == 75" | grep -qx True || fail "newer lines: $(cat "$TMP/o.json")"
output 0 10
json "$TMP/o.json" "j['node'] == 0 and j['lines'][-1] == 'rank 0 more'" | grep -qx True ||
    fail "node 0's own rank: $(cat "$TMP/o.json")"
ok "asked again: the lines printed since; node 0's own ranks too"

# node 1 lost: its ranks' last lines known, and how old they are. The node
# is lost after 5 s without a heartbeat (--node_timeout), as long as an ask
# waits for its node (then "did not send the lines within 5 s", and the
# next call asks again): wait for the state, gone, not for either answer
MSRUN1=$(pgrep -P "$NPID1") # under timeout
kill -9 $MSRUN1
wait "$NPID1" 2>/dev/null
end=$((SECONDS + 30))
while [ $SECONDS -lt $end ]; do
    output 3 2
    [ "$LAST" = 200 ] && json "$TMP/o.json" "'gone' in j.get('stale', '')" 2>/dev/null |
        grep -qx True && break
    sleep 0.1
done
json "$TMP/o.json" "'gone' in j['stale'] and j['lines'][-1] == 'rank 3 more' and j['age_s'] >= 0" |
    grep -qx True || fail "a gone node's rank: $LAST $(cat "$TMP/o.json")"
ok "a rank whose node is gone: its last lines known, with their age"

# node 0 waits for a replacement of node 1 (and, interrupted, gives the
# coordinator 10 s to see the nodes leave): killed instead; its workers and
# its coordinator die with it (parent-death signals)
touch "$TMP/p.end"
kill -9 $(pgrep -P "$NPID0") 2>/dev/null
wait_pid "$NPID0" 10
no_leftovers "two nodes"
exit $FAILED
