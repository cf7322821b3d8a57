#!/bin/bash
# kill -9 of an agent in an elastic job (--nnodes 2:3): the job re-forms on
# the two nodes left (world size 3 -> 2), then takes in a node that joins
# later; it ends with the fault-free result (the job's result does not
# depend on the world size). The job holds before its end until the late
# node was taken in (lib_fault.sh's gate).
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/fault/lib_fault.sh"
use_token_file
reference_digest >/dev/null
port=$(free_port)
common=(--master_addr=127.0.0.1 --master_port="$port" --nnodes=2:3 --local_worker_num=1
    --max_restarts=3 --node_timeout=2 --last_call=0.3 --log_level=info)
args=("$JOB" "$TMP/ck" "$ITERS" "$EVERY" "$SLEEP_MS" "$TMP/result")
for n in 0 1 2; do
    # no timeout wrapper: $pN must be msrun itself (ctest's limit bounds the test)
    env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" "${common[@]}" "${args[@]}" \
        >"$TMP/n$n.out" 2>"$TMP/n$n.err" &
    eval "p$n=$!"
    # the first starts the coordinator (the one the test never kills)
    [ $n = 0 ] && wait_coordinator 127.0.0.1 "$port"
done
# the first generation on 3 nodes: 0 when node 2 joined within the last
# call, else the re-form that took it in (a loaded machine can start its
# msrun more than --last_call after node 1's; gen 0 is then on 2 nodes)
wait_for "start gen [0-9]* rank [0-9] of 3 " "$TMP/n0.out" 30 || fail "3 nodes formed"
g3=$(first_gen_of 3 "$TMP/n0.out")
# a random point of the run, or the gate if the run got there first
sleep "$(rand_delay 0.2 0.6)"
kill -9 "$p2" || fail "node 2's msrun was gone before the kill"
wait "$p2" 2>/dev/null
wait_gen_after "$g3" 2 "$TMP/n0.out" 20 || fail "re-formed on 2 nodes after generation $g3"
# a node joining later is taken in at the next generation
env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" "${common[@]}" "${args[@]}" \
    >"$TMP/n3.out" 2>"$TMP/n3.err" &
p3=$!
wait_for "start gen [0-9]* rank [0-9] of 3 " "$TMP/n3.out" 30 ||
    fail "the late node was not taken in (world 3 again)"
release
for n in 0 1 3; do
    eval "pid=\$p$n"
    wait_pid "$pid" 90
    c=$CODE
    [ "$c" = 0 ] || { cat "$TMP/n$n.err" >&2; fail "node process $n exited $c"; }
done
expect_in "start gen [0-9]* rank [0-9] of 3 " "$TMP/n3.out" "the late node was taken in (world 3 again)"
expect_digest "$TMP/result"
# after the world size changed twice (three times when generation 0 ran on
# 2 nodes), only the 3 newest steps are left
steps=$(ls -d "$TMP"/ck/step-* 2>/dev/null | wc -l)
[ "$steps" -le 3 ] || fail "$steps checkpoint steps left, at most 3 kept: $(ls "$TMP/ck")"
no_leftovers "elastic agent kill"
no_shm_leftovers "elastic agent kill"
ok "elastic: a lost node, re-formed smaller, a late node taken in, same result"
