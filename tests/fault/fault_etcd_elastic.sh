#!/bin/bash
# Coordinator failover through etcd in an elastic job (--nnodes 2:3): 3 msrun
# on loopback run the fault job; the msrun whose lease holds
# /msrun/<job>/leader is killed with SIGKILL together with its coordinator
# child mid-run and nothing replaces it. Another node wins the election,
# starts a coordinator that resumes the job from etcd, the two nodes left
# follow it and the job re-forms without the lost node (a new generation of
# world size 2), which ends with exit 0 and the fault-free result. msrun
# status, asked at the address etcd's leader key now holds, shows that
# generation, the 2 nodes left running and the failure of generation 0
# (the killed node lost), served by a coordinator that a surviving msrun
# started. The job holds before its end until then (lib_fault.sh's gate).
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/integration/etcd_lib.sh"
. "$MSRUN_SOURCE/tests/fault/lib_fault.sh"
use_token_file
start_etcd
reference_digest >/dev/null
# the job id lib_fault.sh gave the test: its shared-memory files carry it
job=$MSRUN_JOB_ID
common=(--rdzv_backend=etcd --rdzv_endpoint="$ETCD_EP" --rdzv_id="$job" --nnodes=2:3
    --local_worker_num=1 --max_restarts=3 --etcd_lease=1 --node_timeout=1
    --heartbeat_interval=0.3 --last_call=20 --cluster_time_out=20 --log_level=info)
args=("$JOB" "$TMP/ck" "$ITERS" "$EVERY" "$SLEEP_MS" "$TMP/result")
pids=()
for n in 0 1 2; do
    # no timeout wrapper: the pids must be msrun itself (ctest's limit
    # bounds the test)
    env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" "${common[@]}" "${args[@]}" \
        >"$TMP/n$n.out" 2>"$TMP/n$n.err" &
    pids+=($!)
done
# generation 0 on all 3 nodes: it forms as soon as the third is in, so the
# last call is a deadline for a late msrun (at 0.3 s a loaded machine ran
# generation 0 on 2). After the failover it must not delay the re-form:
# the new coordinator learns of the killed node's loss (node_timeout) after
# the others are ready, and that loss has to form the generation
wait_formed 3
# a checkpoint in, then the coordinator's node goes
wait_checkpoint "$TMP/ck"
# a random point of the run, or the gate if the run got there first
sleep "$(rand_delay 0.2 0.5)"
old=$(etcd_get --print-value-only "/msrun/$job/leader")
[ -n "$old" ] || fail "no leader in etcd"
read -r agent coord < <(coordinator_of "--etcd_prefix /msrun/$job " "${pids[@]}") ||
    fail "no coordinator of $job is a child of one of the 3 msrun"
victim=
for n in 0 1 2; do [ "${pids[$n]}" = "$agent" ] && victim=$n; done
kill -9 "$agent" "$coord" || fail "msrun $agent or its coordinator $coord was gone before the kill"
wait "$agent" 2>/dev/null
echo "killed node $victim: msrun $agent and its coordinator $coord (it was at $old)"
left=()
for n in 0 1 2; do [ "$n" = "$victim" ] || left+=("$n"); done

# the job re-forms on the 2 nodes left: both run a generation of 2
for n in "${left[@]}"; do
    wait_for "start gen [1-9][0-9]* rank [01] of 2" "$TMP/n$n.out" 20 ||
        fail "node $n did not run a generation of world size 2 within 20 s of the kill"
done
new=$(etcd_get --print-value-only "/msrun/$job/leader")
[ -n "$new" ] && [ "$new" != "$old" ] ||
    fail "the leader key holds '$new' (was '$old')"
coordinator_of "--etcd_prefix /msrun/$job " "${pids[${left[0]}]}" "${pids[${left[1]}]}" >/dev/null ||
    fail "no new coordinator is a child of a surviving msrun"
"$MSRUN" status --master_addr "${new%:*}" --master_port "${new##*:}" --json \
    >"$TMP/status.json" 2>"$TMP/status.err" || fail "msrun status at $new: $(cat "$TMP/status.err")"
python3 - "$TMP/status.json" "${pids[${left[0]}]}" "${pids[${left[1]}]}" <<'PY' ||
import json, sys
s = json.load(open(sys.argv[1]))
assert s["generation"] >= 1 and s["world_size"] == 2 and s["node_count"] == 2, s
running = [n["pid"] for n in s["nodes"] if n["state"] == "running"]
assert sorted(running) == sorted(map(int, sys.argv[2:])), s["nodes"]
assert 0 in [f["generation"] for f in s["failures"]], s["failures"]
PY
    fail "msrun status after the failover: $(cat "$TMP/status.json")"
release

for n in "${left[@]}"; do
    wait_pid "${pids[$n]}" 60
    [ "$CODE" = 0 ] || fail "node $n exited $CODE"
done
expect_digest "$TMP/result"
errs=()
for n in "${left[@]}"; do errs+=("$TMP/n$n.err"); done
grep -q "won the election for /msrun/$job/leader" "${errs[@]}" || fail "no node won the election"
grep -q "elected to run the coordinator: it listens on $new" "${errs[@]}" ||
    fail "no node said it runs the coordinator at $new"
[ "$(cat "${errs[@]}" | grep -c "the coordinator is now at $new")" = 2 ] ||
    fail "not both nodes left followed the coordinator to $new"
[ -z "$(etcd_get --prefix "/msrun/$job" --keys-only)" ] || fail "the job's keys are left in etcd"
stop_etcd
no_leftovers "etcd elastic failover"
no_shm_leftovers "etcd elastic failover"
ok "etcd elastic failover: the coordinator's node killed, another elected, the job re-formed on 2 nodes, same result"
