# Shared helpers for the integration tests: run the real msrun with a
# deadline, check its output, and make sure nothing is left behind.
set -u
BUILD=${MSRUN_BUILD:?MSRUN_BUILD must point at the build directory}
MSRUN=$BUILD/bin/msrun
WORKER=$BUILD/tests/it_worker
TMP=$(mktemp -d /tmp/msrun-test.XXXXXX)
# Only msrun and its children carry this marker: the test shell does not.
MARKER="msrt-$$-$RANDOM$RANDOM"
FAILED=0
# wait_for, wait_count
. "$(dirname "${BASH_SOURCE[0]}")/../wait_lib.sh"

# Processes (pid list) that still carry this test's marker: one grep over
# every environment (a pipeline per process took most of a second on a
# machine with slow process starts).
leftovers() {
    { grep -l -z -x -F -- "MSRUN_TEST_MARKER=$MARKER" /proc/[0-9]*/environ 2>/dev/null || :; } |
        sed -n 's|^/proc/\([0-9]*\)/environ$|\1|p'
}

# children_named PID PATTERN: PID's child processes whose command line
# matches PATTERN (grep -E), from the kernel's list of PID's children
children_named() {
    local t c
    for t in /proc/"$1"/task/*; do
        for c in $(cat "$t/children" 2>/dev/null); do
            tr '\0' ' ' <"/proc/$c/cmdline" 2>/dev/null | grep -qE -- "$2" && echo "$c"
        done
    done
}

# coordinator_of PATTERN PID...: "MSRUN COORD" of the msrun among the PIDs
# that runs a coordinator child whose command line matches PATTERN
coordinator_of() {
    local pat=$1 p c
    shift
    for p in "$@"; do
        c=$(children_named "$p" "^[^ ]*msrun coordinator .*$pat")
        [ -n "$c" ] && echo "$p $c" && return 0
    done
    return 1
}

cleanup() {
    # a test's own daemons (munged, slurmd, ...) go first
    if declare -F test_cleanup >/dev/null; then test_cleanup; fi
    # then the shell's own children: one forked for a background command
    # and not yet at its exec carries no marker, and would start the
    # command after the scan below. The kernel's list and the builtins, no
    # program: pkill hung where a test exports a sanitizer's LD_PRELOAD.
    local t c kids
    for t in /proc/$$/task/*/children; do
        kids=()
        read -r -a kids <"$t" 2>/dev/null
        for c in "${kids[@]}"; do
            kill -9 "$c" 2>/dev/null
        done
    done
    local left
    left=$(leftovers)
    if [ -n "$left" ]; then
        echo "cleanup: killing leftover processes: $left" >&2
        kill -9 $left 2>/dev/null
        # gone before the test ends: a killed process keeps its marker
        # until it has exited, which a loaded machine may delay
        local i
        for ((i = 0; i < 100; i++)); do
            [ -z "$(leftovers)" ] && break
            sleep 0.1
        done
    fi
    rm -rf "$TMP"
}
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up (with [[ ]]: a plain
# [ as the trap's first command gave a false status in such a child)
trap '[[ $BASHPID == "$$" ]] && { cleanup; }' EXIT

fail() {
    echo "FAIL $*" >&2
    FAILED=1
    if [ -f "$TMP/out" ]; then echo "--- stdout:" >&2; tail -n 30 "$TMP/out" >&2; fi
    if [ -f "$TMP/err" ]; then echo "--- stderr:" >&2; tail -n 30 "$TMP/err" >&2; fi
    # the output of each msrun of a multi-node test (a.out, n0.err, ...)
    local f
    for f in "$TMP"/*.out "$TMP"/*.err; do
        [ -f "$f" ] || continue
        echo "--- $(basename "$f"):" >&2
        tail -n 30 "$f" >&2
    done
    exit 1
}

ok() { echo "ok   $*"; }

# a TCP port free on loopback right now
# free_port [N]: N free ports (see scripts/free_port.py for why not bind(0)'s),
# claimed for this test's shell until it exits, so that no test running
# beside it gets them. Without N: one port P, with P + 1 claimed beside it:
# a port handed out may become msrun's master_port, and its workers'
# MASTER_PORT is master_port + 1 (--torch_port's default), which msrun
# refuses to start without; no other test may be handed it.
free_port() {
    if [ $# -eq 0 ]; then
        local pair
        pair=$(free_port --consecutive 2) || return 1
        echo "${pair%%$'\n'*}"
        return 0
    fi
    MSRUN_PORT_CLAIMS="$BUILD/tests/port-claims" MSRUN_PORT_OWNER=$$ \
        python3 "$(dirname "${BASH_SOURCE[0]}")/../../scripts/free_port.py" "$@"
}

# use_token_file: every msrun started after this gets the same job token
# from a 0600 file, as a scheduler would hand one out (a job of several
# nodes has no default token; only its node 0 can make one up).
use_token_file() {
    (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$TMP/token")
    export MSRUN_TOKEN_FILE="$TMP/token"
}

# start_munged: a munged of this test's own (key, socket, pid, seed and
# log in $TMP/munge), stopped by stop_munged (call it from test_cleanup);
# exports MSRUN_MUNGE_SOCKET. Exits 77 (skipped) when munged is missing.
# $TMP becomes 0711 so that other users (runuser) can reach the socket.
start_munged() {
    MUNGED=$(command -v munged || echo /usr/sbin/munged)
    if [ ! -x "$MUNGED" ] || ! command -v munge >/dev/null; then
        echo "SKIP: munged or munge is not installed (Debian: munge)"
        exit 77
    fi
    local d=$TMP/munge i
    chmod 0711 "$TMP"
    mkdir -m 0755 "$d"
    head -c 128 /dev/urandom >"$d/munge.key"
    chmod 0400 "$d/munge.key"
    export MSRUN_MUNGE_SOCKET=$d/munge.sock
    "$MUNGED" -F --key-file="$d/munge.key" --socket="$MSRUN_MUNGE_SOCKET" \
        --pid-file="$d/munged.pid" --seed-file="$d/munged.seed" >"$d/munged.log" 2>&1 &
    MUNGED_PID=$!
    for ((i = 0; i < 200; i++)); do
        munge -S "$MSRUN_MUNGE_SOCKET" -n >/dev/null 2>&1 && return 0
        kill -0 "$MUNGED_PID" 2>/dev/null || break
        sleep 0.05
    done
    cat "$d/munged.log" >&2
    fail "munged did not answer on $MSRUN_MUNGE_SOCKET within 10 s"
}

stop_munged() {
    [ -n "${MUNGED_PID:-}" ] || return 0
    kill "$MUNGED_PID" 2>/dev/null
    local i
    for ((i = 0; i < 100; i++)); do
        kill -0 "$MUNGED_PID" 2>/dev/null || break
        sleep 0.05
    done
    kill -9 "$MUNGED_PID" 2>/dev/null
    wait "$MUNGED_PID" 2>/dev/null
    MUNGED_PID=
}

# run_msrun ARGS...: runs msrun (60 s at most) with stdout in $TMP/out,
# stderr in $TMP/err and the exit status in $CODE.
run_msrun() {
    CODE=0
    timeout -k 5 60 env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" "$@" >"$TMP/out" 2>"$TMP/err" || CODE=$?
}

# Starts msrun in the background; $BG_PID is msrun's pid. The output files
# are emptied first, here: a redirection of a command run with & truncates
# in the child, which on a slow machine comes after the caller's first look
# for a line (and finds the run before's).
start_msrun() {
    : >"$TMP/out"
    : >"$TMP/err"
    env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" "$@" >"$TMP/out" 2>"$TMP/err" &
    BG_PID=$!
}

# start_node N ARGS...: msrun in the background (its pid in PIDN), output
# in $TMP/nodeN.{out,err}, emptied here as start_msrun's
start_node() {
    local n=$1
    shift
    : >"$TMP/node$n.out"
    : >"$TMP/node$n.err"
    # NODE_LIMIT: seconds for timeout(1) to give it (PIDN is then timeout's)
    env MSRUN_TEST_MARKER="$MARKER" ${NODE_LIMIT:+timeout -k 5 "$NODE_LIMIT"} "$MSRUN" "$@" \
        >"$TMP/node$n.out" 2>"$TMP/node$n.err" &
    eval "PID$n=$!"
}

# status ARGS...: msrun status (20 s at most), stdout in $TMP/st, stderr in
# $TMP/st.err, exit status in $CODE
status() {
    CODE=0
    timeout -k 5 20 "$MSRUN" status "$@" >"$TMP/st" 2>"$TMP/st.err" || CODE=$?
}

# check_json PYTHON: runs PYTHON with j = the JSON in $TMP/st
check_json() {
    python3 -c "import json, sys
j = json.load(open(sys.argv[1]))
$1" "$TMP/st" 2>"$TMP/py.err" || { cat "$TMP/st" "$TMP/py.err" >&2; return 1; }
}

# poll_status SECONDS PYTHON ARGS...: `msrun status --json ARGS` until
# PYTHON holds, for SECONDS at most; j is the JSON and, where it is one job's
# (--job_id), rel maps the node rank of each running node to its relay
poll_status() {
    local end=$((SECONDS + $1)) cond=$2
    shift 2
    while ((SECONDS < end)); do
        status --json "$@"
        [ "$CODE" = 0 ] && python3 -c "import json, sys
j = json.load(open(sys.argv[1]))
rel = None
if isinstance(j, dict):
    rel = {n['node_rank']: n['relay'] for n in j['nodes'] if n['state'] == 'running'}
assert $cond, j" "$TMP/st" 2>"$TMP/py.err" && return 0
        sleep 0.2
    done
    cat "$TMP/st" "$TMP/st.err" "$TMP/py.err" >&2
    return 1
}

expect_code() {
    [ "$CODE" = "$1" ] || fail "$2: exit status $CODE, want $1"
}

expect_in() {
    grep -q -- "$1" "$2" || fail "$3: '$1' not in $(basename "$2")"
}

expect_not_in() {
    ! grep -q -- "$1" "$2" || fail "$3: '$1' unexpectedly in $(basename "$2")"
}

# no_leftovers WHAT: no process of the test's is left, 10 s after msrun
# exited at the most (a deadline for the last exits to be reaped, not a
# measured wait: the loop ends as soon as none is left)
no_leftovers() {
    local i left
    for ((i = 0; i < 200; i++)); do
        left=$(leftovers)
        [ -z "$left" ] && return 0
        sleep 0.05
    done
    fail "$1: processes left behind: $(for p in $left; do tr '\0' ' ' <"/proc/$p/cmdline"; echo; done)"
}

# wait_pid PID SECONDS: waits for a background process, at most SECONDS;
# sets CODE to its exit status, or kills it and fails the test.
wait_pid() {
    local pid=$1 limit=$2 i
    for ((i = 0; i < limit * 20; i++)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            CODE=0
            wait "$pid" || CODE=$?
            return 0
        fi
        sleep 0.05
    done
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    fail "process $pid still running after $limit s"
}

# http_get PORT PATH OUT [HEADER...]: GETs http://127.0.0.1:PORT PATH (a
# dashboard's) into OUT; prints the status and the cookie it set, if any
# ("000" when nothing answers).
http_get() {
    python3 - "$@" <<'PY'
import http.client, sys
port, path, out = sys.argv[1:4]
headers = dict(h.split(": ", 1) for h in sys.argv[4:])
c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=10)
try:
    c.request("GET", path, headers=headers)
    r = c.getresponse()
    body = r.read()
except OSError as e:
    print("000")
    sys.exit(0)
open(out, "wb").write(body)
print(r.status, (r.getheader("Set-Cookie") or "").split(";")[0])
PY
}

# json FILE EXPR: evaluates a Python expression on the JSON in FILE (as j).
json() {
    python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval("(" + sys.argv[2] + ")"))' "$1" "$2"
}
