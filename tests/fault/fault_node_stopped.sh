#!/bin/bash
# The node that runs the embedded coordinator is declared lost by it
# (msrun stopped with SIGSTOP past --node_timeout; its worker runs on): with
# no restart left and no node alive, the coordinator fails the job and
# exits. When msrun goes on (SIGCONT), it restarts the coordinator once,
# which reads the same end from its state file and exits again; msrun then
# stops its worker and exits 1 naming the cause, promptly, instead of
# restarting the coordinator until --coordinator_timeout and reporting "lost
# the coordinator". The job's ranks hold at the gate (never released).
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/fault/lib_fault.sh"
start_msrun --worker_num=1 --max_restarts=0 --node_timeout=2 --coordinator_timeout=30 \
    "$JOB" "$TMP/ck" "$ITERS" "$EVERY" "$SLEEP_MS" "$TMP/result"
wait_started 1 "$TMP/out"
coord=$(children_named "$BG_PID" "^[^ ]*msrun coordinator ")
[ -n "$coord" ] || fail "no coordinator process under msrun ($BG_PID)"
kill -STOP "$BG_PID"
# the coordinator ends the job without the stopped node and exits (a zombie
# until msrun, stopped, reaps it)
for ((i = 0; i < 400; i++)); do
    st=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$coord/status" 2>/dev/null)
    [ -z "$st" ] || [ "$st" = Z ] && break
    sleep 0.05
done
kill -CONT "$BG_PID"
[ -z "$st" ] || [ "$st" = Z ] || fail "the coordinator did not end the job within 20 s (state $st)"
# well within --coordinator_timeout (30 s)
wait_pid "$BG_PID" 20
expect_code 1 "a node declared lost"
expect_in "the coordinator declared this node lost" "$TMP/err" "the cause named"
expect_not_in "lost the coordinator" "$TMP/err" "not the coordinator's loss"
n=$(grep -c "restarted it on" "$TMP/err")
[ "$n" -le 2 ] || fail "the coordinator was restarted $n times"
no_leftovers "node stopped"
no_shm_leftovers "node stopped"
ok "a node declared lost by its own coordinator: exit 1 with the cause, no restart loop"
