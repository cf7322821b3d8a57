#!/bin/bash
# Bad input: one clear line and exit status 2, before any worker starts.
. "$(dirname "$0")/lib.sh"

printf '#!/bin/sh\ntouch "%s/started.$MSR_RANK"\n' "$TMP" >"$TMP/prog.sh"
chmod +x "$TMP/prog.sh"
printf 'not executable\n' >"$TMP/plain"

bad() {
    local want="$1"
    shift
    run_msrun "$@"
    expect_code 2 "msrun $*"
    grep -q -- "$want" "$TMP/err" || fail "msrun $*: message '$want' missing"
    [ "$(grep -c "error" "$TMP/err")" = 1 ] || fail "msrun $*: one error line"
    ls "$TMP"/started.* >/dev/null 2>&1 && fail "msrun $*: a worker started"
    ok "$want"
}

bad "unknown option '--bogus'" --bogus 3 "$TMP/prog.sh"
bad "no program given" --worker_num=2
bad "--worker_num=abc is not a positive integer" --worker_num=abc "$TMP/prog.sh"
bad "--worker_num=0 is not a positive integer" --worker_num=0 "$TMP/prog.sh"
bad "--local_worker_num=-1 is not a positive integer" --local_worker_num=-1 "$TMP/prog.sh"
bad "worker_num 6 is not a multiple of local_worker_num 4" --worker_num=6 --local_worker_num=4 \
    "$TMP/prog.sh"
bad "program 'no-such-program-xyz' not found in PATH" --worker_num=2 no-such-program-xyz
bad "is not executable" --worker_num=2 "$TMP/plain"
bad "is a directory" --worker_num=2 "$TMP"
bad "is not a port number" --master_port=99999 "$TMP/prog.sh"
bad "node_rank 2 is out of range" --worker_num=2 --node_rank=2 "$TMP/prog.sh"
bad "rank 5 is out of range (the job has 2 ranks)" --worker_num=2 --local_worker_num=2 \
    --show_ranks=5 "$TMP/prog.sh"
bad "rank 3 is out of range" --worker_num=2 --local_worker_num=2 --show_ranks=0,2-3 "$TMP/prog.sh"
bad "--join=false (exit once the workers are started) is not supported" --worker_num=1 \
    --local_worker_num=1 --join=false "$TMP/prog.sh"
bad "needs --master_addr" --worker_num=4 --local_worker_num=2 "$TMP/prog.sh"
# a name that cannot be resolved is said whole, with the resolver's reason
long=no-such-host-with-a-name-longer-than-sixty-four-bytes-for-msrun.invalid
bad "master_addr: cannot resolve '$long': [A-Z][a-z]" --master_addr="$long" --worker_num=1 \
    "$TMP/prog.sh"
bad "is not HOST:PORT (an IPv6 address goes in brackets" --rdzv_endpoint=::1:29500 \
    --worker_num=1 "$TMP/prog.sh"
# a flag takes a value only after '=': the next word is the program
bad "program 'True' not found in PATH (a flag takes a value only after '='" --worker_num=1 \
    --bind_core True
# the environment variable case needs the variable set for msrun only
CODE=0
timeout 30 env MSRUN_TEST_MARKER="$MARKER" MSRUN_WORKER_NUM=x "$MSRUN" "$TMP/prog.sh" \
    >"$TMP/out" 2>"$TMP/err" || CODE=$?
expect_code 2 "bad MSRUN_WORKER_NUM"
expect_in "MSRUN_WORKER_NUM=x is not a positive integer" "$TMP/err" "environment checked"
ok "MSRUN_WORKER_NUM=x"

# msrun, `msrun coordinator` and `msrun status` parse with one table-driven
# parser: one set of bounds, and '-' or '_' alike in every name.
bad "--cluster_time_out=0: must be at least" --cluster_time_out=0 "$TMP/prog.sh"

# verdict CMD ARGS...: "accepted" when the options parsed (the command then
# stops at its next check: the missing program, the missing token), else
# "refused: <error line>". Nothing is started either way.
verdict() {
    local code=0
    timeout -k 5 20 env -u MSRUN_TOKEN -u MSRUN_TOKEN_FILE MSRUN_TEST_MARKER="$MARKER" \
        "$MSRUN" "$@" >"$TMP/out" 2>"$TMP/err" || code=$?
    [ "$code" = 2 ] || fail "msrun $*: exit status $code, not 2"
    if grep -q "no-such-program-xyz' not found\|no job token" "$TMP/err"; then
        echo accepted
    else
        echo "refused: $(cat "$TMP/err")"
    fi
}
for opt in cluster_time_out=0 cluster_time_out=0.0001 cluster_time_out=0.5 last_call=0 \
    last_call=2 node_timeout=0.05 node_timeout=7 worker_num=0 worker_num=4 max_restarts=-1 \
    max_restarts=3 nnodes=0:2 nnodes=3:2 nnodes=1:2 store_keys_max=0 store_keys_max=9 \
    store_value_max=0 store_value_max=64K log_level=loud log_level=debug; do
    agent=$(verdict --"$opt" --local_worker_num=1 --master_addr=127.0.0.1 no-such-program-xyz)
    coord=$(verdict coordinator --"$opt")
    [ "${agent%%:*}" = "${coord%%:*}" ] ||
        fail "--$opt: msrun and msrun coordinator disagree: '$agent' against '$coord'"
done
ok "msrun and msrun coordinator accept the same values"

out=$(verdict --cluster-time-out=5 --master-addr=127.0.0.1 --job-id=j --local-worker-num=1 \
    no-such-program-xyz)
[ "$out" = accepted ] || fail "msrun with dashes: $out"
out=$(verdict coordinator --cluster-time-out=5 --master-addr=127.0.0.1 --job-id=j \
    --node-timeout=7 --store-keys-max=9)
[ "$out" = accepted ] || fail "msrun coordinator with dashes: $out"
# status stops at the unreadable file: after parsing every name before it
out=$(verdict status --master-addr=127.0.0.1 --master-port=1 --job-id=j --tls-ca="$TMP/none.pem")
case "$out" in *"--tls_ca=$TMP/none.pem: cannot read it"*) ;; *) fail "status --tls-ca: $out" ;; esac
ok "'-' and '_' alike in msrun, msrun coordinator and msrun status"

# a port in use by another program (its 30 s only outlast the one msrun
# below, which fails at once; the test stops it)
python3 - "$TMP/port" <<'PY' &
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
time.sleep(30)
PY
holder=$!
wait_for . "$TMP/port" 20 || fail "the port holder did not start"
port=$(cat "$TMP/port")
bad "port $port on 127.0.0.1 is in use" --master_addr=127.0.0.1 --master_port="$port" \
    --worker_num=2 "$TMP/prog.sh"
kill "$holder"
no_leftovers "bad input"
