#!/bin/bash
# msrun status per job (issue 39): the user, the command (shortened), the
# step and the last loss once the workers report them, the dashboard's
# address (never a login code); two jobs of this user both shown; a record
# that names another user skipped unless --all; --json carries the same.
. "$(dirname "$0")/lib.sh"
unset MSRUN_MASTER_ADDR MSRUN_MASTER_PORT MSRUN_TOKEN MSRUN_TOKEN_FILE MSRUN_JOB_ID
export XDG_RUNTIME_DIR=$TMP/xdg
mkdir -m 700 "$XDG_RUNTIME_DIR"
RUN=$XDG_RUNTIME_DIR/msrun
ME=$(id -un)

# A worker that reports steps 1..3 (loss 2.5 on rank 0, 3.5 on rank 1),
# says so, and runs until $TMP/stop appears (60 s at most).
cat >"$TMP/report.sh" <<SH
#!/bin/sh
for s in 1 2 3; do echo "msrun:metric step=\$s loss=\$((RANK + 2)).5"; done
echo "rank \$RANK reported"
i=0
while [ ! -e "$TMP/stop" ] && [ \$i -lt 600 ]; do sleep 0.1; i=\$((i + 1)); done
SH
chmod +x "$TMP/report.sh"

start_job() { # start_job N ARGS...: msrun in the background (PIDN), output in $TMP/jobN.*
    local n=$1
    shift
    : >"$TMP/job$n.out"
    : >"$TMP/job$n.err"
    env MSRUN_TEST_MARKER="$MARKER" timeout -k 5 90 "$MSRUN" "$@" >"$TMP/job$n.out" \
        2>"$TMP/job$n.err" &
    eval "PID$n=$!"
}

# 1. two jobs of this user: both shown, each with its user and command;
#    the one that reported shows its step and mean loss; the dashboard's
#    address without a login code
rm -f "$TMP/stop"
dport=$(free_port)
start_job 1 --job_id=first --worker_num=2 --dashboard_port="$dport" "$TMP/report.sh" --lr 0.1
start_job 2 --job_id=second --worker_num=1 /bin/sleep 60
wait_count "reported" "$TMP/job1.out" 2 30 || fail "the first job's workers reported"
for ((i = 0; i < 100; i++)); do # the node sends progress once a second
    status --job_id=first --json
    [ "$CODE" = 0 ] && check_json "assert j['step'] == 3 and j['loss'] is not None" 2>/dev/null &&
        break
    sleep 0.2
done
status
[ "$CODE" = 0 ] || { cat "$TMP/st" "$TMP/st.err"; fail "status: exit $CODE"; }
expect_in "^job first: running" "$TMP/st" "the first job shown"
expect_in "^job second: running" "$TMP/st" "the second job shown"
expect_in "^  user $ME, command: $TMP/report.sh --lr 0.1$" "$TMP/st" "the first job's command"
expect_in "^  user $ME, command: /bin/sleep 60$" "$TMP/st" "the second job's command"
expect_in "^  step 3, loss 3 (mean of 2 ranks)$" "$TMP/st" "the step and the mean loss"
expect_in "^  dashboard http://127.0.0.1:$dport/$" "$TMP/st" "the dashboard's address"
expect_not_in "code=\|login" "$TMP/st" "no login code"
[ "$(grep -c "^  step " "$TMP/st")" = 1 ] || fail "a step shown for a job that reported none"
ok "two jobs of this user: user, command, step, loss and the dashboard's address"

status --json
[ "$CODE" = 0 ] || fail "status --json: exit $CODE"
check_json "
assert len(j) == 2, j
by = {s['job_id']: s for s in j}
a, b = by['first'], by['second']
assert a['user'] == '$ME' and a['command'] == '$TMP/report.sh --lr 0.1', a
assert a['step'] == 3 and a['loss'] == 3.0 and a['reporting_ranks'] == 2, a
assert a['dashboard'] == 'http://127.0.0.1:$dport/', a
assert b['command'] == '/bin/sleep 60' and b['step'] is None and b['loss'] is None, b
assert b['dashboard'] is None and b['reporting_ranks'] == 0, b
" || fail "status --json carries the same fields"
ok "--json: user, command, step, loss, dashboard"

# 2. a record naming another user (as a msrun of another uid writes it):
#    skipped, and shown with --all. Its msrun is a process of this test's.
sleep 60 &
other=$!
uid=$(($(id -u) + 1))
printf 'job_id=theirs\ncoordinator=127.0.0.1:1\ntoken=x\npid=%d\nnode_rank=-1\n' "$other" \
    >"$RUN/$other.job"
printf 'start_time=1\nuid=%d\nuser=someone\ncommand=their.py\ndashboard=\n' "$uid" \
    >>"$RUN/$other.job"
chmod 600 "$RUN/$other.job"
status
[ "$CODE" = 0 ] || fail "status with another user's record: exit $CODE"
expect_not_in "theirs" "$TMP/st" "another user's job skipped"
status --json
check_json "assert sorted(s['job_id'] for s in j) == ['first', 'second'], j" ||
    fail "--json skips another user's job"
status --all
[ "$CODE" = 1 ] || fail "--all: exit $CODE, want 1 (their coordinator is unreachable)"
expect_in "^job theirs: unreachable" "$TMP/st" "--all shows another user's job"
expect_in "^job first: running" "$TMP/st" "--all shows this user's too"
kill "$other"
wait "$other" 2>/dev/null
ok "another user's record skipped, shown with --all"

# 3. a long command is shortened: the record keeps 159 bytes, "..." at the end
long=$(printf 'x%.0s' $(seq 1 200))
start_job 3 --job_id=long --worker_num=1 /bin/sh -c "sleep 60" "$long"
for ((i = 0; i < 100; i++)); do
    status --job_id=long
    [ "$CODE" = 0 ] && break
    sleep 0.2
done
cmd=$(sed -n 's/^  user [^,]*, command: //p' "$TMP/st")
[ "${#cmd}" = 159 ] && [ "${cmd: -3}" = "..." ] || fail "a long command: '${cmd}' (${#cmd})"
ok "a long command is cut to 159 bytes with '...'"

touch "$TMP/stop"
for n in 1 2 3; do
    eval "p=\$PID$n"
    [ "$n" = 1 ] || kill -INT "$p"
    wait_pid "$p" 30
done
no_leftovers "status of jobs"
exit $FAILED
