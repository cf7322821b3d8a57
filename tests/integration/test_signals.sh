#!/bin/bash
# Signals to msrun reach the workers; SIGKILL follows the grace period;
# nothing is left behind.
. "$(dirname "$0")/lib.sh"

cat >"$TMP/trapper.sh" <<'SH'
#!/bin/bash
trap 'echo "rank $RANK got INT"; exit 5' INT
trap 'echo "rank $RANK got USR1"' USR1
# the signals reach the whole process group: the sleeper ignores them, and
# says the rank is ready only once it does (a subshell starts with USR1's
# default action, which would end it); its 30 s only outlast the test's
# checks, after which msrun stops the group
(trap '' USR1 INT; echo "rank $RANK ready"; exec sleep 30) & child=$!
while kill -0 $child 2>/dev/null; do wait $child; done
SH
chmod +x "$TMP/trapper.sh"

start_msrun --worker_num=3 --local_worker_num=3 "$TMP/trapper.sh"
wait_count "ready" "$TMP/out" 3 20 || fail "workers did not start"
kill -USR1 "$BG_PID"
wait_count "got USR1" "$TMP/out" 3 10 || fail "SIGUSR1 forwarded"
kill -INT "$BG_PID"
wait_pid "$BG_PID" 20
expect_code 130 "SIGINT"
[ "$(grep -c "got INT" "$TMP/out")" = 3 ] || fail "every worker got SIGINT"
no_leftovers "SIGINT"
ok "SIGUSR1 and SIGINT forwarded, exit 130, nothing left"

cat >"$TMP/stubborn.sh" <<'SH'
#!/bin/bash
trap '' TERM INT
echo "rank $RANK ready"
while true; do sleep 0.2; done
SH
chmod +x "$TMP/stubborn.sh"
start_msrun --worker_num=4 --local_worker_num=4 --grace_period=1 "$TMP/stubborn.sh"
wait_count "ready" "$TMP/out" 4 20 || fail "stubborn workers did not start"
t0=$(date +%s.%N)
kill -TERM "$BG_PID"
wait_pid "$BG_PID" 20
t1=$(date +%s.%N)
expect_code 143 "SIGTERM"
expect_in "did not stop within 1.0 s of SIGTERM: sent SIGKILL" "$TMP/err" "SIGKILL after grace"
# derived from --grace_period=1: msrun cannot be done before it (0.9 for
# the clocks' rounding); the upper bound, 10 times it, leaves room for a
# loaded machine to send the SIGKILL and reap the workers (they never stop by
# themselves: without the SIGKILL, wait_pid's 20 s fail the test)
python3 -c "import sys; d=$t1-$t0; sys.exit(0 if 0.9 < d < 10 else 1)" ||
    fail "stopped within the grace period (took $(python3 -c "print($t1-$t0)") s)"
no_leftovers "SIGTERM"
ok "SIGTERM: grace, then SIGKILL, exit 143, nothing left"

# msrun killed outright: its workers die with it (PR_SET_PDEATHSIG)
start_msrun --worker_num=2 --local_worker_num=2 "$TMP/stubborn.sh"
wait_count "ready" "$TMP/out" 2 20 || fail "workers did not start"
kill -KILL "$BG_PID"
wait "$BG_PID" 2>/dev/null
no_leftovers "SIGKILL of msrun"
ok "msrun killed: no orphans"
