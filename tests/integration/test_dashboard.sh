#!/bin/bash
# The dashboard's login and its limits (docs/observe.md, docs/security.md):
# the login URL only on a terminal or in a new 0600 file, codes that expire
# and work once, `msrun dashboard` minting one with the job token, a
# session cookie per port, a cap on connections, no spin when descriptors
# run out and a total deadline per request that trickling cannot extend.
. "$(dirname "$0")/lib.sh"

TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
export MSRUN_TOKEN=$TOKEN
export XDG_RUNTIME_DIR=$TMP/xdg TMPDIR=$TMP
mkdir -m 0700 "$XDG_RUNTIME_DIR"
read -r PORT PORT2 PORT3 < <(free_port 3 | tr '\n' ' ')

# login PORT CODE: the status of /login?code=CODE, the cookie it set and
# the body's first line
login() {
    python3 - "$1" "$2" <<'PY'
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
c.request("GET", "/login?code=" + sys.argv[2])
r = c.getresponse()
print(r.status, (r.getheader("Set-Cookie") or "-").split(";")[0], r.read().decode().splitlines()[0])
PY
}

# file_of ERRFILE: the login file a line of ERRFILE names
file_of() { sed -n 's/.*login URL, good once within [0-9]* s, is in \(.*\), mode 0600).*/\1/p' "$1" | head -1; }
code_in() { grep -o 'login?code=[0-9a-f]*' "$1" | head -1 | cut -d= -f2; }

# start_coord PORT ERR ARGS...: a standalone coordinator with a dashboard on
# PORT, its stderr in ERR; $CPID is its pid
start_coord() {
    local port=$1 err=$2
    shift 2
    : >"$err" # emptied here, not by the child's redirection (lib.sh's start_msrun)
    env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" coordinator --port 0 --dashboard_port "$port" "$@" \
        2>"$err" &
    CPID=$!
    wait_for "dashboard at http://127.0.0.1:$port/" "$err" 15 || fail "no dashboard on $port"
}
stop_coord() { kill "$1" 2>/dev/null; wait_pid "$1" 15; }

# --- a job's URL: not on a stderr that is no terminal, in a 0600 file ---
start_msrun --worker_num=1 --dashboard_port="$PORT" sleep 60
wait_for "dashboard at http://127.0.0.1:$PORT/ (its login URL" "$TMP/err" 30 || fail "the login file line"
expect_not_in "code=" "$TMP/err" "a stderr that is not a terminal"
FILE=$(file_of "$TMP/err")
[ "$(basename "$FILE")" = dashboard.url ] && [ -f "$FILE" ] || fail "the login file: '$FILE'"
[ "$(stat -c %a "$FILE")" = 600 ] || fail "the login file's mode: $(stat -c %a "$FILE")"
CODE=$(code_in "$FILE")
read -r st cookie _ < <(login "$PORT" "$CODE")
[ "$st" = 303 ] && [ "${cookie%%=*}" = "msrun_session_$PORT" ] || fail "login: $st $cookie"
[ "$(login "$PORT" "$CODE" | cut -d' ' -f1)" = 401 ] || fail "a used code must be refused"
ok "the job's login URL: not on stderr (no terminal), in a 0600 file, works once"

# --- msrun dashboard: a new code for the running job, with its token ---
run_dash() {
    CODE=0
    timeout -k 5 30 "$MSRUN" dashboard --dashboard_port "$PORT" "$@" >"$TMP/dout" 2>"$TMP/derr" || CODE=$?
}
run_dash
expect_code 0 "msrun dashboard: $(cat "$TMP/derr")"
expect_not_in "code=" "$TMP/derr" "msrun dashboard's stderr (no terminal)"
DFILE=$(file_of "$TMP/derr")
case "$DFILE" in "$XDG_RUNTIME_DIR"/msrun/dashboard-"$PORT"-*.url) ;; *) fail "its file: '$DFILE'" ;; esac
[ "$(stat -c %a "$DFILE")" = 600 ] || fail "msrun dashboard's file mode"
read -r st cookie _ < <(login "$PORT" "$(code_in "$DFILE")")
[ "$st" = 303 ] || fail "the minted code: $st"
[ "$(http_get "$PORT" /api/job "$TMP/j" "Cookie: $cookie")" = "200 " ] || fail "its cookie"
# /api/login mints only on POST with the token itself, not the cookie
[ "$(http_get "$PORT" /api/login "$TMP/j" "Authorization: Bearer $TOKEN")" = "405 " ] ||
    fail "GET /api/login"
python3 - "$PORT" "$cookie" <<'PY' || fail "POST /api/login with the cookie only"
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
c.request("POST", "/api/login", headers={"Cookie": sys.argv[2]})
sys.exit(0 if c.getresponse().status == 401 else 1)
PY
# codes minted one after the other are each good: a new one takes a free
# slot, not the place of a live one
run_dash --dashboard_login_file "$TMP/code1"
expect_code 0 "the first of two codes"
run_dash --dashboard_login_file "$TMP/code2"
expect_code 0 "the second of two codes"
for f in code1 code2; do
    [ "$(login "$PORT" "$(code_in "$TMP/$f")" | cut -d' ' -f1)" = 303 ] || fail "the $f minted"
done
MSRUN_TOKEN=${TOKEN}0 run_dash
expect_code 1 "msrun dashboard with a wrong token"
expect_in "refused (HTTP 401): not the job's token" "$TMP/derr" "a wrong token"
MSRUN_TOKEN= run_dash --job_id nosuchjob
expect_code 2 "msrun dashboard without a token"
ok "msrun dashboard mints a working code with the job token, refused without it"
# without a port or a token: both from the record of the job of this machine
CODE=0
timeout -k 5 30 env -u MSRUN_TOKEN "$MSRUN" dashboard >"$TMP/dout" 2>"$TMP/derr" || CODE=$?
expect_code 0 "msrun dashboard with neither port nor token: $(cat "$TMP/derr")"
DFILE=$(file_of "$TMP/derr")
[ "$(login "$PORT" "$(code_in "$DFILE")" | cut -d' ' -f1)" = 303 ] || fail "the code from the record"
CODE=0
timeout -k 5 30 env -u MSRUN_TOKEN "$MSRUN" dashboard --job_id nosuchjob >"$TMP/dout" \
    2>"$TMP/derr" || CODE=$?
expect_code 2 "msrun dashboard for no such job"
expect_in "no job with a dashboard runs here" "$TMP/derr" "no such job"
ok "msrun dashboard finds the port and token of the job of this machine"

# --dashboard_login_file: a link planted there, or a file, is refused
ln -s "$TMP/target" "$TMP/planted"
run_dash --dashboard_login_file "$TMP/planted"
expect_code 1 "a link at the login file"
expect_in "cannot write the dashboard's login URL to $TMP/planted" "$TMP/derr" "a link"
[ ! -e "$TMP/target" ] || fail "the link was followed"
: >"$TMP/exists"
run_dash --dashboard_login_file "$TMP/exists"
expect_code 1 "an existing login file"
[ ! -s "$TMP/exists" ] || fail "an existing file was written"
ok "a login file is new: a planted link or an existing file is refused"
kill -TERM "$BG_PID"
wait_pid "$BG_PID" 30
[ ! -e "$FILE" ] || fail "the job's login file outlives the job"

# --- msrun hands the dashboard's limits to the coordinator it starts ---
# (the whole command line is in msrun's debug log: the coordinator, a copy
# of msrun, shows only as much of it as msrun's own command line has room for)
start_msrun --worker_num=1 --log_level=debug --dashboard_port="$PORT" \
    --dashboard_max_connections 7 --dashboard_request_timeout 2.5 sleep 60
wait_for "dashboard at http://127.0.0.1:$PORT/ (its login URL" "$TMP/err" 30 || fail "no dashboard"
ARGS=$(sed -n 's/.*starting the embedded coordinator: //p' "$TMP/err")
case $ARGS in
*"--dashboard_max_connections 7 "*"--dashboard_request_timeout 2.500"*) ;;
*) fail "msrun's coordinator was started with: $ARGS" ;;
esac
ok "msrun hands --dashboard_max_connections and --dashboard_request_timeout to its coordinator"
kill "$BG_PID" 2>/dev/null
wait_pid "$BG_PID" 15

# --- on a terminal, the URL itself ---
python3 - "$MSRUN" "$PORT2" "$TMP/tty" <<'PY' || fail "the URL on a terminal: $(cat "$TMP/tty")"
import os, pty, subprocess, sys, time
msrun, port, out = sys.argv[1:4]
master, slave = pty.openpty()
p = subprocess.Popen([msrun, "coordinator", "--port", "0", "--dashboard_port", port],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave)
os.close(slave)
got, deadline = b"", time.time() + 15
while b"login?code=" not in got and time.time() < deadline:
    try:
        got += os.read(master, 4096)
    except OSError:
        break
p.terminate()
p.wait()
open(out, "wb").write(got)
sys.exit(0 if b"dashboard at http://127.0.0.1:%s/login?code=" % port.encode() in got else 1)
PY
ok "on a terminal, stderr shows the login URL"

# --- a code expires unused ---
start_coord "$PORT2" "$TMP/c2.err" --dashboard_login_ttl 1
CFILE=$(file_of "$TMP/c2.err")
CODE=$(code_in "$CFILE")
# the clock's state, not a hope: past the file's making plus the ttl
made=$(stat -c %Y "$CFILE")
for ((i = 0; i < 100; i++)); do [ "$(date +%s)" -ge $((made + 2)) ] && break; sleep 0.1; done
read -r st _ msg < <(login "$PORT2" "$CODE")
[ "$st" = 401 ] && [[ "$msg" == *"has expired"* ]] || fail "an expired code: $st $msg"
ok "a login code expires unused (--dashboard_login_ttl 1)"

stop_coord "$CPID"

# --- two dashboards on one host keep their own cookies ---
start_coord "$PORT3" "$TMP/c3.err"
C3PID=$CPID
start_coord "$PORT2" "$TMP/c2b.err"
MSRUN_DASHBOARD_LOGIN_FILE=$TMP/l2 "$MSRUN" dashboard --dashboard_port "$PORT2" 2>/dev/null ||
    fail "a code of the second dashboard"
read -r st2 cookie2 _ < <(login "$PORT2" "$(code_in "$TMP/l2")")
read -r st3 cookie3 _ < <(login "$PORT3" "$(code_in "$(file_of "$TMP/c3.err")")")
[ "${cookie2%%=*}" = "msrun_session_$PORT2" ] && [ "${cookie3%%=*}" = "msrun_session_$PORT3" ] ||
    fail "cookie names: $cookie2 $cookie3"
for p in "$PORT2" "$PORT3"; do
    [ "$(http_get "$p" /api/job "$TMP/j" "Cookie: $cookie2; $cookie3")" != "401 " ] ||
        fail "the jar of both cookies on $p"
done
ok "two dashboards' session cookies do not collide (msrun_session_<port>)"
C3FILE=$(file_of "$TMP/c3.err")
stop_coord "$C3PID"
[ -n "$C3FILE" ] && [ ! -e "$C3FILE" ] || fail "a standalone coordinator's login file outlives it"

# --- the login ttl's bounds: 1 s to a day ---
for v in 1 86400; do
    run_msrun --dashboard_login_ttl "$v" --dry_run sleep 1
    expect_code 0 "--dashboard_login_ttl $v"
done
for v in 0.999 86401; do
    run_msrun --dashboard_login_ttl "$v" --dry_run sleep 1
    expect_code 2 "--dashboard_login_ttl $v"
done
ok "--dashboard_login_ttl takes 1 s to a day"
# the coordinator's limits: taken at their bounds (it serves), refused
# one past (exit 2)
coord_takes() {
    # emptied here: a line the coordinator before left would pass the wait
    # at once, and the kill then meets the child still before its exec
    : >"$TMP/cb.err"
    env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" coordinator --port 0 --dashboard_port "$PORT3" "$@" \
        2>"$TMP/cb.err" &
    local pid=$!
    wait_for "dashboard at http://127.0.0.1:$PORT3/" "$TMP/cb.err" 15 || fail "not taken: $*"
    stop_coord "$pid"
}
coord_refuses() {
    CODE=0
    timeout -k 5 15 "$MSRUN" coordinator --port 0 --dashboard_port "$PORT3" "$@" 2>"$TMP/cb.err" || CODE=$?
    expect_code 2 "$*"
}
coord_takes --dashboard_max_connections 1
coord_takes --dashboard_max_connections 65536
coord_refuses --dashboard_max_connections 0
coord_refuses --dashboard_max_connections 65537
coord_takes --dashboard_request_timeout 0.1
coord_takes --dashboard_request_timeout 3600
coord_refuses --dashboard_request_timeout 0.099
coord_refuses --dashboard_request_timeout 3601
ok "--dashboard_max_connections 1 to 65536, --dashboard_request_timeout 0.1 s to an hour"
stop_coord "$CPID"

# --- the connection cap, and the deadline a trickle cannot extend ---
start_coord "$PORT" "$TMP/c4.err" --dashboard_max_connections 3 --dashboard_request_timeout 2
python3 - "$PORT" "$CPID" <<'PY' || fail "the cap or the deadline"
import os, signal, socket, sys, time
port, pid = int(sys.argv[1]), int(sys.argv[2])
def conn():
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.settimeout(0.2)
    return s
def closed(s):
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True
# the 4 in one burst (the coordinator stopped while the kernel queues
# them): it accepts them in one go, and only the 4th is past the cap
os.kill(pid, signal.SIGSTOP)
try:
    held = [conn() for _ in range(3)]
    over = conn()
finally:
    os.kill(pid, signal.SIGCONT)
deadline = time.time() + 10
while not closed(over) and time.time() < deadline:
    pass
if time.time() >= deadline:
    sys.exit("one past the cap (3) was not closed")
if any(closed(s) for s in held):
    sys.exit("a connection at the cap was closed")
for s in held:
    s.close()
# a byte a second: the 2 s deadline from the accept cuts it, however it
# trickles (an idle timeout never would)
t = conn()
start = time.time()
for ch in b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 60:
    try:
        t.send(bytes([ch]))
    except OSError:
        break
    if closed(t):
        break
    time.sleep(0.8)
took = time.time() - start
if took > 8:
    sys.exit("a trickling request lasted %.1f s past a 2 s deadline" % took)
print("cut after %.1f s" % took)
PY
[ "$(http_get "$PORT" /metrics "$TMP/m" "Authorization: Bearer $TOKEN")" = "200 " ] || fail "/metrics"
grep -q '^msrun_dashboard_connections_shed_total 2$' "$TMP/m" ||
    fail "the shed connections: $(grep shed "$TMP/m")"
ok "at the cap connections are held, one past is closed; a trickle is cut at the deadline"
stop_coord "$CPID"

# --- out of descriptors: paused accepts, no spin, a bounded log ---
(ulimit -n 64 && exec env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" coordinator --port 0 \
    --dashboard_port "$PORT" 2>"$TMP/c5.err") &
CPID=$!
wait_for "dashboard at http://127.0.0.1:$PORT/" "$TMP/c5.err" 15 || fail "the dashboard at 64 descriptors"
python3 - "$CPID" "$PORT" <<'PY' || fail "the dashboard out of descriptors: $(head -c 2000 "$TMP/c5.err")"
import os, socket, sys, time
pid, port = sys.argv[1], int(sys.argv[2])
def cpu():
    f = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
conns = []
for _ in range(150):  # past the 64 descriptors: the rest wait in the backlog
    try:
        conns.append(socket.create_connection(("127.0.0.1", port), timeout=1))
    except OSError:
        break
c0, t0 = cpu(), time.time()
time.sleep(3)  # the span measured, not a wait for a state
share = (cpu() - c0) / (time.time() - t0)
print("%d connections, the coordinator's CPU %.0f%% of 3 s" % (len(conns), 100 * share))
if len(conns) < 70:
    sys.exit("only %d connections: the descriptors did not run out" % len(conns))
if share > 0.5:
    sys.exit("the coordinator spins: %.0f%% CPU" % (100 * share))
PY
lines=$(wc -l <"$TMP/c5.err")
[ "$lines" -lt 100 ] || fail "$lines log lines out of descriptors"
expect_in "the dashboard cannot accept connections: Too many open files" "$TMP/c5.err" "EMFILE"
ok "out of descriptors the dashboard pauses its accepts: low CPU, $lines log lines"
stop_coord "$CPID"
no_leftovers "the dashboard's tests"
