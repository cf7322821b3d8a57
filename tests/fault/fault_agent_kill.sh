#!/bin/bash
# kill -9 of an agent (a node lost) in a fixed-size job: its workers die with
# it, the job waits for a replacement node, which joins and takes the free
# node rank; the job resumes from its last checkpoint and ends with the
# fault-free result. The job holds before its end until the replacement
# joined (lib_fault.sh's gate).
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/fault/lib_fault.sh"
use_token_file
reference_digest >/dev/null
port=$(free_port)
common=(--master_addr=127.0.0.1 --master_port="$port" --worker_num=4 --local_worker_num=2
    --max_restarts=3 --node_timeout=2 --log_level=info)
args=("$JOB" "$TMP/ck" "$ITERS" "$EVERY" "$SLEEP_MS" "$TMP/result")
env MSRUN_TEST_MARKER="$MARKER" timeout -k 5 120 "$MSRUN" "${common[@]}" --node_rank=0 "${args[@]}" \
    >"$TMP/n0.out" 2>"$TMP/n0.err" &
n0=$!
env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" "${common[@]}" --node_rank=1 "${args[@]}" \
    >"$TMP/n1.out" 2>"$TMP/n1.err" &
n1=$!
wait_started 2 "$TMP/n0.out"
wait_started 2 "$TMP/n1.out"
# a random point of the run, or the gate if the run got there first
d=$(rand_delay 0.2 0.8)
sleep "$d"
kill -9 "$n1" || fail "node 1's msrun was gone before the kill"
echo "killed node 1's msrun after ${d}s"
wait "$n1" 2>/dev/null
wait_for "was lost" "$TMP/n0.err" 15 || fail "the coordinator noticed the lost node"
# a replacement node joins
env MSRUN_TEST_MARKER="$MARKER" timeout -k 5 120 "$MSRUN" "${common[@]}" "${args[@]}" \
    >"$TMP/n2.out" 2>"$TMP/n2.err" &
n2=$!
wait_for "start gen [1-9]" "$TMP/n2.out" 30 || fail "the replacement ran no generation"
release
wait_pid "$n0" 90
c0=$CODE
wait_pid "$n2" 90
c2=$CODE
[ "$c0" = 0 ] || { cat "$TMP/n0.err" >&2; fail "node 0 exited $c0"; }
[ "$c2" = 0 ] || { cat "$TMP/n2.err" >&2; fail "the replacement exited $c2"; }
expect_in "^\[node 1 rank [23]\] start gen 1" "$TMP/n2.out" "the replacement took node rank 1"
expect_digest "$TMP/result"
no_leftovers "agent kill"
no_shm_leftovers "agent kill"
ok "kill -9 of an agent: a replacement node joined, same result"
