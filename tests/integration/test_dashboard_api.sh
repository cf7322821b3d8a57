#!/bin/bash
# The dashboard for curl, Prometheus and a second browser (docs/usage.md):
# a job without a token given writes its generated token to a 0600 file
# that msrun's dashboard line names (never the token); /metrics answers 200
# to 'Authorization: Bearer <that token>', 401 without it or with a wrong
# one; two login URLs from `msrun dashboard` log in two browsers, both
# valid at once; `msrun dashboard --prometheus` prints a scrape config
# whose credentials_file holds the token.
. "$(dirname "$0")/lib.sh"

unset MSRUN_TOKEN MSRUN_TOKEN_FILE
export XDG_RUNTIME_DIR=$TMP/xdg TMPDIR=$TMP
mkdir -m 0700 "$XDG_RUNTIME_DIR"
PORT=$(free_port)

# status PATH [HEADER...]: the HTTP status of GET PATH (body in $TMP/body)
status() {
    local p=$1
    shift
    http_get "$PORT" "$p" "$TMP/body" "$@" | cut -d' ' -f1
}

# login CODE: the cookie /login?code=CODE set ("-" if none)
login() {
    python3 - "$PORT" "$1" <<'PY'
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
c.request("GET", "/login?code=" + sys.argv[2])
r = c.getresponse()
print((r.getheader("Set-Cookie") or "-").split(";")[0] if r.status == 303 else "-")
PY
}

# --- a standalone job, no token given: its dashboard line names the file ---
start_msrun --worker_num=1 --dashboard_port="$PORT" sleep 60
wait_for "dashboard API (curl, Prometheus)" "$TMP/err" 30 || fail "no line on the dashboard's API"
TF=$(sed -n "s/.*Authorization: Bearer <the token in \(.*\)>'.*/\1/p" "$TMP/err" | head -1)
[ -n "$TF" ] && [ -f "$TF" ] && [ "$(stat -c %a "$TF")" = 600 ] || fail "the token file: '$TF'"
TOKEN=$(cat "$TF")
[ ${#TOKEN} -ge 32 ] || fail "the token file's content"
expect_not_in "$TOKEN" "$TMP/err" "msrun's stderr (the token itself)"
ok "a standalone job's token file, found from the path msrun printed (mode 0600)"

# --- curl's and Prometheus' way: the bearer token ---
[ "$(status /metrics "Authorization: Bearer $TOKEN")" = 200 ] || fail "/metrics with the token"
grep -q '^msrun_job_state{state="running"} 1' "$TMP/body" || fail "/metrics: $(head -5 "$TMP/body")"
[ "$(status /api/job "Authorization: Bearer $TOKEN")" = 200 ] || fail "/api/job with the token"
[ "$(status /metrics)" = 401 ] || fail "/metrics without a token"
[ "$(status /metrics "Authorization: Bearer ${TOKEN}0")" = 401 ] || fail "/metrics, a token too long"
[ "$(status /metrics "Authorization: Bearer ${TOKEN%?}")" = 401 ] || fail "/metrics, one too short"
[ "$(status /metrics "Authorization: Basic $TOKEN")" = 401 ] || fail "/metrics, not Bearer"
ok "/metrics: 200 with the bearer token; 401 without, with a wrong one or another scheme"

# --- two browsers, two login URLs from msrun dashboard: both stay in ---
codes=()
for i in 1 2; do
    CODE=0
    timeout -k 5 30 "$MSRUN" dashboard --dashboard_login_file="$TMP/link$i" >/dev/null \
        2>"$TMP/derr" || CODE=$?
    expect_code 0 "msrun dashboard $i: $(cat "$TMP/derr")"
    codes+=("$(grep -o 'login?code=[0-9a-f]*' "$TMP/link$i" | cut -d= -f2)")
done
[ "${codes[0]}" != "${codes[1]}" ] || fail "two links, one code"
A=$(login "${codes[0]}")
[ "$A" != - ] || fail "the first browser's login"
B=$(login "${codes[1]}")
[ "$B" != - ] || fail "the second browser's login"
[ "$(status /api/job "Cookie: $A")" = 200 ] || fail "the first browser, after the second logged in"
[ "$(status /api/job "Cookie: $B")" = 200 ] || fail "the second browser"
[ "$(login "${codes[0]}")" = - ] || fail "a link works once"
ok "two login URLs of msrun dashboard: two browsers logged in at once"

# --- msrun dashboard --prometheus: a scrape config naming a token file ---
CODE=0
timeout -k 5 30 "$MSRUN" dashboard --prometheus >"$TMP/prom" 2>"$TMP/derr" || CODE=$?
expect_code 0 "msrun dashboard --prometheus: $(cat "$TMP/derr")"
expect_in "targets: \['127.0.0.1:$PORT'\]" "$TMP/prom" "the scrape config's target"
expect_in "type: Bearer" "$TMP/prom" "the scrape config's authorization"
expect_not_in "$TOKEN" "$TMP/prom" "the scrape config (the token itself)"
expect_not_in "$TOKEN" "$TMP/derr" "msrun dashboard's stderr (the token itself)"
PF=$(sed -n 's/^ *credentials_file: //p' "$TMP/prom")
[ -f "$PF" ] && [ "$(stat -c %a "$PF")" = 600 ] && [ "$(cat "$PF")" = "$TOKEN" ] ||
    fail "the scrape config's credentials_file '$PF'"
[ "$(status /metrics "Authorization: Bearer $(cat "$PF")")" = 200 ] || fail "/metrics as configured"
# with --token_file, that file is named
CODE=0
timeout -k 5 30 "$MSRUN" dashboard --prometheus --token_file "$TF" >"$TMP/prom" 2>"$TMP/derr" ||
    CODE=$?
expect_code 0 "msrun dashboard --prometheus --token_file"
expect_in "credentials_file: $TF\$" "$TMP/prom" "the scrape config with --token_file"
ok "msrun dashboard --prometheus: a scrape config whose token is in a 0600 file"

kill "$BG_PID" 2>/dev/null
wait_pid "$BG_PID" 30
[ ! -e "$TF" ] || fail "the job's token file outlived the job"

# --- a token given: the line says so, and no file is written for it ---
export MSRUN_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
start_msrun --worker_num=1 --dashboard_port="$PORT" sleep 60
wait_for "dashboard API (curl, Prometheus)" "$TMP/err" 30 || fail "no line on the dashboard's API"
expect_in "Bearer <the job token you gave>" "$TMP/err" "the line for a given token"
expect_not_in "$MSRUN_TOKEN" "$TMP/err" "msrun's stderr (the token given)"
[ "$(status /metrics "Authorization: Bearer $MSRUN_TOKEN")" = 200 ] || fail "/metrics, given token"
kill "$BG_PID" 2>/dev/null
wait_pid "$BG_PID" 30
no_leftovers "the jobs"
ok "a given token: the line says to send it, and /metrics takes it"
exit $FAILED
