#!/bin/bash
# Munge authentication (docs/security.md): with --auth=munge a node without
# the job token proves with a munge credential that it runs as the job's
# user and receives the token; credentials of another job, another
# coordinator, another uid, expired, replayed or forged are refused. Runs
# its own munged (no Slurm needed); skipped (77) when munge is missing.
. "$(dirname "$0")/lib.sh"
AUTH=$BUILD/tests/auth_client

test_cleanup() {
    [ -n "${COORD_PID:-}" ] && kill -9 "$COORD_PID" 2>/dev/null
    stop_munged
}
start_munged
unset MSRUN_TOKEN MSRUN_TOKEN_FILE

# 1. A 2-node job on loopback, no token anywhere: node 1 gets node 0's
#    token with munge, and its workers' barrier with node 0's passes
#    through both proxies and the coordinator.
port=$(free_port)
for r in 0 1; do
    env MSRUN_TEST_MARKER="$MARKER" timeout -k 5 60 "$MSRUN" --auth=munge --master_addr=127.0.0.1 \
        --master_port="$port" --nnodes=2 --node_rank=$r --local_worker_num=2 --job_id=mj1 \
        "$WORKER" barrier >"$TMP/n$r.out" 2>"$TMP/n$r.err" &
    eval "pid$r=\$!"
done
wait_pid "$pid0" 60
expect_code 0 "munge job, node 0"
wait_pid "$pid1" 60
expect_code 0 "munge job, node 1"
expect_in "authenticated to the coordinator at 127.0.0.1:$port with munge" "$TMP/n1.err" \
    "node 1 authenticated with munge"
expect_not_in "generated one in" "$TMP/n0.err" "no token file to hand around with munge"
no_leftovers "munge job"
ok "a 2-node job with --auth=munge and no token runs (node 1 got the token with munge)"

# 2. The coordinator's checks, one Auth call each (auth_client).
token=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
port=$(free_port)
MSRUN_TOKEN=$token env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" coordinator --host 127.0.0.1 \
    --port "$port" --job_id mj2 --auth munge --worker_num 1 --local_worker_num 1 \
    >"$TMP/coord.out" 2>"$TMP/coord.err" &
COORD_PID=$!
cred() { munge -S "$MSRUN_MUNGE_SOCKET" "$@"; }
payload="msrun-auth 1 job=mj2 coordinator=127.0.0.1:$port"
c=$(cred -s "$payload")
out=$("$AUTH" "127.0.0.1:$port" mj2 "$c") || fail "a valid credential was refused: $out"
[ "$out" = "auth: token of ${#token} characters" ] || fail "valid credential: $out"
ok "a fresh credential of this uid for this job and coordinator gets the token"

# refused: expect_refused WHAT PATTERN CREDENTIAL
expect_refused() {
    local out code=0
    out=$(printf '%s\n' "$3" | "$AUTH" "127.0.0.1:$port" mj2 -) || code=$?
    [ "$code" = 3 ] || fail "$1: exit $code, want 3 (refused): $out"
    echo "$out" | grep -qi -- "$2" || fail "$1: '$2' not in: $out"
    ok "refused: $1"
}
expect_refused "the same credential again (replay)" "replay" "$c"
expect_refused "a credential for another job" "another job" \
    "$(cred -s "msrun-auth 1 job=mj3 coordinator=127.0.0.1:$port")"
expect_refused "a credential for another coordinator" "another coordinator" \
    "$(cred -s "msrun-auth 1 job=mj2 coordinator=127.0.0.1:$((port + 1))")"
expect_refused "a credential without msrun's payload" "not an msrun credential" "$(cred -s hello)"
expect_refused "a forged credential" "munge refused" "MUNGE:AwQFAAB1bm1hZ2ljYWxseQ==:"
expect_refused "no credential" "munge refused" ""
c=$(cred -t 1 -s "$payload")
# a wait that must last, not a state to reach (decoding the credential to
# see it expire would make it a replay): 3 s is its time to live (1 s) plus
# munge's whole-second timestamps (up to 1 s more) with a second to spare; a
# slow machine only makes the wait longer and the credential older
sleep 3
expect_refused "an expired credential (time to live 1 s)" "expired" "$c"
if [ "$(id -u)" = 0 ] && command -v runuser >/dev/null; then
    c=$(runuser -u nobody -- munge -S "$MSRUN_MUNGE_SOCKET" -s "$payload") ||
        fail "munge as nobody"
    expect_refused "a credential of another uid (nobody)" "not the job's" "$c"
else
    echo "skip a credential of another uid: not root"
fi
kill "$COORD_PID" 2>/dev/null
wait "$COORD_PID" 2>/dev/null
COORD_PID=

# 3. A coordinator started without --auth=munge serves no Auth call to a
#    caller without its token.
port=$(free_port)
MSRUN_TOKEN=$token env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" coordinator --host 127.0.0.1 \
    --port "$port" --job_id mj2 --worker_num 1 --local_worker_num 1 \
    >"$TMP/coord.out" 2>"$TMP/coord.err" &
COORD_PID=$!
code=0
out=$("$AUTH" "127.0.0.1:$port" mj2 "$(cred -s "msrun-auth 1 job=mj2 coordinator=127.0.0.1:$port")") ||
    code=$?
[ "$code" = 3 ] || fail "Auth without --auth=munge: exit $code, want 3: $out"
kill "$COORD_PID" 2>/dev/null
wait "$COORD_PID" 2>/dev/null
COORD_PID=
ok "a coordinator without --auth=munge refuses Auth calls"

# 4. End to end refusal: node 0's job belongs to another uid (SLURM_JOB_UID),
#    so node 1's credential is refused and it stops with exit 2 before any
#    worker starts.
port=$(free_port)
env MSRUN_TEST_MARKER="$MARKER" SLURM_JOB_UID=4242 timeout -k 5 60 "$MSRUN" --auth=munge \
    --master_addr=127.0.0.1 --master_port="$port" --nnodes=2 --node_rank=0 --local_worker_num=1 \
    --job_id=mj4 --cluster_time_out=20 "$WORKER" barrier >"$TMP/n0.out" 2>"$TMP/n0.err" &
pid0=$!
CODE=0
env MSRUN_TEST_MARKER="$MARKER" timeout -k 5 60 "$MSRUN" --auth=munge --master_addr=127.0.0.1 \
    --master_port="$port" --nnodes=2 --node_rank=1 --local_worker_num=1 --job_id=mj4 \
    "$WORKER" barrier >"$TMP/n1.out" 2>"$TMP/n1.err" || CODE=$?
expect_code 2 "node 1 with a credential of the wrong uid"
expect_in "munge authentication to the coordinator at 127.0.0.1:$port failed" "$TMP/n1.err" \
    "node 1 says why"
expect_in "not the job's (uid 4242)" "$TMP/n1.err" "node 1 names the uid"
kill "$pid0" 2>/dev/null
wait_pid "$pid0" 30
no_leftovers "refused node"
ok "a node whose uid is not the job's is refused and exits 2"
