#!/bin/bash
# msrun --ps_servers N (and MSRUN_PS_SERVERS): the last N ranks are servers,
# every rank knows its role (MSR_ROLE, MSR_PS_SERVERS, msr_ps_role); N at
# the bound (world - 1) and one past, and values that are not counts.
. "$(dirname "$0")/../integration/lib.sh"
PSW=$BUILD/tests/ps_worker

# roles_ok WORLD SERVERS: every rank printed the role the rule gives it
roles_ok() {
    local world=$1 servers=$2 r
    for ((r = 0; r < world; r++)); do
        if [ "$r" -ge $((world - servers)) ]; then
            want="ROLE $r server $((r - world + servers)) $servers"
        else
            want="ROLE $r worker $r $((world - servers))"
        fi
        expect_in "^\[node 0 rank $r\] $want\$" "$TMP/out" "$servers of $world: rank $r"
    done
    expect_in "ok roles" "$TMP/out" "$servers of $world"
    expect_not_in "FAIL" "$TMP/err" "$servers of $world"
}

run_msrun --worker_num=4 --local_worker_num=4 --ps_servers=1 "$PSW" roles
expect_code 0 "--ps_servers=1"
roles_ok 4 1
ok "--ps_servers=1 of 4: rank 3 the server"

# the bound: world - 1 servers leave one worker
run_msrun --worker_num=4 --local_worker_num=4 --ps_servers=3 "$PSW" roles
expect_code 0 "--ps_servers=3"
roles_ok 4 3
ok "--ps_servers=3 of 4 (the bound)"

# the environment, for pods
CODE=0
timeout -k 5 60 env MSRUN_TEST_MARKER="$MARKER" MSRUN_PS_SERVERS=2 "$MSRUN" --worker_num=4 \
    --local_worker_num=4 "$PSW" roles >"$TMP/out" 2>"$TMP/err" || CODE=$?
expect_code 0 "MSRUN_PS_SERVERS=2"
roles_ok 4 2
ok "MSRUN_PS_SERVERS=2"

# every process's environment names its role
run_msrun --worker_num=3 --local_worker_num=3 --ps_servers=1 env
expect_code 0 "env with --ps_servers=1"
for r in 0 1; do
    expect_in "^\[node 0 rank $r\] MSR_ROLE=worker\$" "$TMP/out" "rank $r's MSR_ROLE"
done
expect_in "^\[node 0 rank 2\] MSR_ROLE=server\$" "$TMP/out" "rank 2's MSR_ROLE"
[ "$(grep -c 'MSR_PS_SERVERS=1$' "$TMP/out")" = 3 ] || fail "MSR_PS_SERVERS=1 not in every rank"
ok "MSR_ROLE and MSR_PS_SERVERS in every rank's environment"

# --ps_staleness: the servers' mode in every rank's environment (-1, the
# synchronous default, and K >= 0), refused below -1, not a number, or
# without servers
run_msrun --worker_num=3 --local_worker_num=3 --ps_servers=1 --ps_staleness=3 env
expect_code 0 "--ps_staleness=3"
[ "$(grep -c 'MSR_PS_STALENESS=3$' "$TMP/out")" = 3 ] || fail "MSR_PS_STALENESS=3 not in every rank"
run_msrun --worker_num=2 --local_worker_num=2 --ps_servers=1 --ps_staleness=-1 env
expect_code 0 "--ps_staleness=-1"
[ "$(grep -c 'MSR_PS_STALENESS=-1$' "$TMP/out")" = 2 ] || fail "MSR_PS_STALENESS=-1 not in every rank"
run_msrun --worker_num=2 --local_worker_num=2 --ps_servers=1 env
[ "$(grep -c 'MSR_PS_STALENESS=-1$' "$TMP/out")" = 2 ] || fail "no default MSR_PS_STALENESS=-1"
for bad in -2 x; do
    run_msrun --worker_num=2 --local_worker_num=2 --ps_servers=1 --ps_staleness=$bad true
    expect_code 2 "--ps_staleness=$bad"
    expect_in "ps_staleness=$bad is not an integer >= -1" "$TMP/err" "--ps_staleness=$bad"
done
run_msrun --worker_num=2 --local_worker_num=2 --ps_staleness=1 true
expect_code 2 "--ps_staleness without --ps_servers"
expect_in "needs --ps_servers" "$TMP/err" "--ps_staleness without --ps_servers"
ok "--ps_staleness: -1 and 3 passed on, -2 and x refused, and without servers"

# without the option no role is set: every rank a worker
run_msrun --worker_num=2 --local_worker_num=2 env
expect_code 0 "env without --ps_servers"
expect_not_in "MSR_ROLE=" "$TMP/out" "no --ps_servers"
expect_not_in "MSR_PS_STALENESS=" "$TMP/out" "no --ps_servers"
ok "no roles without --ps_servers"

# one past the bound, and values that are not counts: refused before any
# worker starts, with a clear message
for bad in 4 5 -1 x 1.5 ""; do
    run_msrun --worker_num=4 --local_worker_num=4 --ps_servers="$bad" "$PSW" roles
    expect_code 2 "--ps_servers=$bad"
    case $bad in
    4 | 5) expect_in "ps_servers=$bad leaves no worker: it must be below the world size (4 ranks)" \
        "$TMP/err" "--ps_servers=$bad" ;;
    *) expect_in "ps_servers=$bad is not an integer >= 0" "$TMP/err" "--ps_servers=$bad" ;;
    esac
    expect_not_in "ROLE" "$TMP/out" "--ps_servers=$bad"
done
CODE=0
timeout -k 5 60 env MSRUN_TEST_MARKER="$MARKER" MSRUN_PS_SERVERS=4 "$MSRUN" --worker_num=4 \
    --local_worker_num=4 "$PSW" roles >"$TMP/out" 2>"$TMP/err" || CODE=$?
expect_code 2 "MSRUN_PS_SERVERS=4"
expect_in "leaves no worker" "$TMP/err" "MSRUN_PS_SERVERS=4"
# an elastic job: the fewest nodes' world is the bound
run_msrun --nnodes=1:2 --local_worker_num=2 --master_addr=127.0.0.1 --ps_servers=2 true
expect_code 2 "--ps_servers=2 with 1:2 nodes of 2"
expect_in "at the fewest nodes" "$TMP/err" "elastic bound"
ok "--ps_servers past the bound, negative, not a number: refused"
no_leftovers "roles"
exit "$FAILED"
