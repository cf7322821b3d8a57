#!/bin/bash
# The root cause is the failure a lost peer followed, not the peer's exit
# that came first: in a 2-node job, node 1's msrun is stopped (SIGSTOP) and
# its rank killed, so rank 0 on node 0 loses its peer in an allreduce and
# exits first, reported "after losing a communication peer" (libmsrun told
# its msrun). When node 1's msrun goes on (SIGCONT) and reports the kill,
# the coordinator names it as generation 0's root cause; the job resumes
# and ends with the fault-free result. The job holds before its end until
# the kill is done (lib_fault.sh's gate), and its ranks hold in allreduces.
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/fault/lib_fault.sh"
use_token_file
reference_digest >/dev/null
port=$(free_port)
common=(--master_addr=127.0.0.1 --master_port="$port" --worker_num=2 --local_worker_num=1
    --max_restarts=3 --node_timeout=20 --log_level=warn)
# no checkpoint before the end (every ITERS + 1 iterations): wherever the
# kill lands, in the iterations or at the gate, rank 0 is in an allreduce or
# about to enter one (the peer's loss shows there), never in a checkpoint's
# store calls (there it would wait for the store, and node 1 would be
# declared lost first)
args=("$JOB" "$TMP/ck" "$ITERS" $((ITERS + 1)) "$SLEEP_MS" "$TMP/result")
env MSRUN_TEST_MARKER="$MARKER" timeout -k 5 120 "$MSRUN" "${common[@]}" --node_rank=0 "${args[@]}" \
    >"$TMP/n0.out" 2>"$TMP/n0.err" &
n0=$!
# not under timeout(1), which continues a stopped child (wait_pid bounds it)
env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" "${common[@]}" --node_rank=1 \
    "${args[@]}" >"$TMP/n1.out" 2>"$TMP/n1.err" &
n1=$!
wait_started 1 "$TMP/n0.out"
wait_started 1 "$TMP/n1.out"
# a random point of the run, or the gate if the run got there first
sleep "$(rand_delay 0 0.5)"
agent1=$n1
victim=$(job_pids 0 1)
[ -n "$victim" ] || fail "no rank 1 to kill"
kill -STOP "$agent1"
kill -9 "$victim" || { kill -CONT "$agent1"; fail "rank 1 ($victim) was gone before the kill"; }
release
wait_for "after losing a communication peer" "$TMP/n0.err" 20 ||
    { kill -CONT "$agent1"; fail "rank 0's exit after the lost peer: $(cat "$TMP/n0.err")"; }
kill -CONT "$agent1"
wait_for "warning: generation 0.s root cause: rank 1 on node 1 .* was killed by SIGKILL (then rank 0 on node 0" \
    "$TMP/n0.err" 20 || fail "the late report is the root cause: $(cat "$TMP/n0.err")"
wait_pid "$n0" 90
c0=$CODE
wait_pid "$n1" 90
c1=$CODE
[ "$c0" = 0 ] && [ "$c1" = 0 ] || { cat "$TMP/n0.err" "$TMP/n1.err" >&2; fail "exit statuses $c0 and $c1"; }
expect_in "restart 1 of 3 after rank 0 on node 0 .* exited with code 1 after losing a communication peer" \
    "$TMP/n0.err" "the first report"
expect_in "start gen 1" "$TMP/n0.out" "a new generation ran"
expect_digest "$TMP/result"
no_leftovers "root cause"
no_shm_leftovers "root cause"
ok "a rank killed while its node's msrun was stopped is the root cause, not its peer that exited first"
