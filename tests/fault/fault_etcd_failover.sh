#!/bin/bash
# Coordinator failover through etcd (--rdzv_backend=etcd): 3 msrun on
# loopback train train_gpt with checkpoints. The msrun whose lease holds
# /msrun/<job>/leader is killed with SIGKILL together with its coordinator
# child while training runs (generation 0 trains to step 25, checkpointed,
# and holds there, so the kill cannot come after training ended, however
# slow the machine) and a replacement node is started (the job's size is
# fixed, 3): another node is elected, starts a coordinator that resumes the
# job from etcd, the nodes follow it, the job restarts from its last
# checkpoint and ends with exactly the losses of a run never killed. Then
# the same with two kills, the second while the generation the first began
# runs. The new coordinator carries on what etcd holds: after K kills the
# job is at generation K with K restarts used and a failure history of
# generations 0..K-1 (msrun status). The job's keys are gone from etcd at
# the end.
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/integration/etcd_lib.sh"
start_etcd
export MSRUN_TOKEN="failover-$RANDOM$RANDOM"
steps=120
upto=25 # where generation 0 of a job with kills stops and holds
args=(--layers 2 --channels 32 --heads 4 --seq 16 --micro-batch 2 --zero 0
    --ckpt-every 5 --ckpt-keep 2 --resume)

# The workers of generation G wait at a gate while DIR/hold.G exists (30 s
# at most), each saying so with DIR/held.G.RANK: the test kills and asks
# while a generation is known to run. Then they train to step $STEPS; or,
# where DIR/upto.G holds a step, to that step (a checkpoint: its multiple
# of --ckpt-every), and then say so with DIR/at.G.RANK and hold (60 s at
# most) until the test's kill stops the generation. The learning rate does
# not depend on --steps, so training on from there gives the losses of a
# run that never stopped.
cat >"$TMP/gate.sh" <<'SH'
g=${MSR_GENERATION:-0}
if [ -e "$GATE/hold.$g" ]; then
    touch "$GATE/held.$g.$MSR_RANK"
    for ((i = 0; i < 300; i++)); do [ -e "$GATE/hold.$g" ] || break; sleep 0.1; done
fi
if [ -e "$GATE/upto.$g" ]; then
    "$@" --steps "$(cat "$GATE/upto.$g")" || exit
    touch "$GATE/at.$g.$MSR_RANK"
    for ((i = 0; i < 600; i++)); do sleep 0.1; done
    exit 3
fi
exec "$@" --steps "$STEPS"
SH

# node JOB DIR N: one msrun of job JOB (output in DIR/nN.log)
node() {
    env MSRUN_TEST_MARKER="$MARKER" GATE="$2" STEPS=$steps "$MSRUN" --rdzv_backend=etcd \
        --rdzv_endpoint="$ETCD_EP" --rdzv_id="$1" --nnodes=3 --local_worker_num=1 \
        --max_restarts=3 --etcd_lease=1 --heartbeat_interval=0.3 --node_timeout=1.5 \
        --cluster_time_out=60 bash "$TMP/gate.sh" "$BUILD/bin/train_gpt" "${args[@]}" \
        --ckpt-dir "$2/ck" --loss-log "$2/loss.log" >"$2/n$3.log" 2>&1 &
    PIDS+=($!)
}

# held DIR G [WHAT]: waits until the 3 workers of generation G are at the
# gate (WHAT "held", before training) or at step $upto (WHAT "at")
held() {
    local i w=${3:-held}
    for ((i = 0; i < 600; i++)); do
        [ -e "$1/$w.$2.0" ] && [ -e "$1/$w.$2.1" ] && [ -e "$1/$w.$2.2" ] && return 0
        sleep 0.1
    done
    fail "$(basename "$1"): generation $2 did not reach its gate ($w) on 3 nodes within 60 s"
}

# status_of JOB DIR KILLS: msrun status of the coordinator of the moment
# (etcd's leader key says where) while generation KILLS runs: it resumed
# the job from etcd, so generation, restarts and failure history go on
status_of() {
    local addr
    addr=$(etcd_get --print-value-only "/msrun/$1/leader")
    [ -n "$addr" ] || fail "$1: no leader in etcd"
    "$MSRUN" status --master_addr "${addr%:*}" --master_port "${addr##*:}" --json \
        >"$2/status.json" 2>"$2/status.err" || fail "$1: msrun status: $(cat "$2/status.err")"
    python3 - "$2/status.json" "$3" <<'PY' || fail "$1: status after $3 kills: $(cat "$2/status.json")"
import json, sys
s, k = json.load(open(sys.argv[1])), int(sys.argv[2])
assert s["generation"] == k and s["restarts"] == k, (s["generation"], s["restarts"])
assert [f["generation"] for f in s["failures"]] == list(range(k)), s["failures"]
PY
}

# run JOB KILLS: the job on 3 nodes, its coordinator's node killed KILLS
# times: first once generation 0 trained to step $upto (held there), then
# while the generation the kill before began runs (at the gate)
run() {
    local job=$1 kills=$2 dir="$TMP/$1" k i
    mkdir -p "$dir"
    for ((k = 1; k <= kills; k++)); do touch "$dir/hold.$k"; done
    [ "$kills" -gt 0 ] && echo $upto >"$dir/upto.0"
    PIDS=()
    for i in 0 1 2; do node "$job" "$dir" "$i"; done
    for ((k = 1; k <= kills; k++)); do
        if [ $k = 1 ]; then
            held "$dir" 0 at # trained to step $upto, checkpointed
        else
            held "$dir" $((k - 1))
        fi
        local coord= agent=
        # the coordinator of the moment, a child of one of the job's msrun
        # (a failover may be under way: wait)
        for ((i = 0; i < 300; i++)); do
            read -r agent coord < <(coordinator_of "--etcd_prefix /msrun/$job " "${PIDS[@]}") &&
                break
            sleep 0.1
        done
        [ -n "$coord" ] || fail "$job: no coordinator to kill within 30 s"
        kill -9 "$agent" "$coord"
        echo "kill $k: msrun $agent and its coordinator $coord"
        node "$job" "$dir" "r$k" # the replacement of the lost node
    done
    # the workers held at a gate are stopped when the next generation forms
    if [ "$kills" -gt 0 ]; then
        held "$dir" "$kills"
        status_of "$job" "$dir" "$kills"
        rm -f "$dir"/hold.*
    fi
    # the job's end, within a deadline: a node still running after it
    # fails the test with the nodes' logs, rather than ctest's timeout
    # with none
    local rc=0 p alive
    for ((i = 0; i < 1800; i++)); do
        alive=0
        for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.1
    done
    if [ $alive = 1 ]; then
        tail -n 30 "$dir"/n*.log >&2
        fail "$job: the nodes did not end within 180 s"
    fi
    for p in "${PIDS[@]}"; do
        if wait "$p"; then :; else
            local s=$?
            [ $s -eq 137 ] || rc=$s # the killed ones
        fi
    done
    [ $rc -eq 0 ] || {
        tail -n 20 "$dir"/n*.log >&2
        fail "$job: a node exited $rc"
    }
}

run ref 0
[ "$(wc -l <"$TMP/ref/loss.log")" -eq $steps ] || fail "reference: $(wc -l <"$TMP/ref/loss.log") steps"
[ -z "$(etcd_get --prefix /msrun/ref --keys-only)" ] || fail "the job's keys are left in etcd"

check() {
    local dir="$TMP/$1"
    awk '{ last[$2] = $0 } END { for (s in last) print last[s] }' "$dir/loss.log" |
        sort -k2,2n >"$dir/last"
    diff "$TMP/ref/loss.log" "$dir/last" >/dev/null ||
        fail "$1: the losses differ: $(diff "$TMP/ref/loss.log" "$dir/last" | head -5)"
    grep -q "elected to run the coordinator" "$dir"/n*.log || fail "$1: no node took over"
    # the failover's steps are in the log (scripts/bench-failover.sh times them)
    grep -q "the coordinator's key /msrun/$1/leader is gone" "$dir"/n*.log ||
        fail "$1: no node said the leader key was gone"
    grep -q "won the election for /msrun/$1/leader" "$dir"/n*.log || fail "$1: no 'won the election'"
    # the restarts counted on from what etcd held (a coordinator that
    # started empty would count from 0 again)
    grep -q "restart $2 of 3 after" "$dir"/n*.log || fail "$1: no 'restart $2 of 3'"
    grep -q "the coordinator is now at" "$dir"/n*.log || fail "$1: no node followed"
    grep -q -E "resumed from step [0-9]*[05] under" "$dir"/n*.log ||
        fail "$1: no resume from a checkpoint"
    [ -z "$(etcd_get --prefix "/msrun/$1" --keys-only)" ] || fail "$1: keys left in etcd"
}
run one 1
check one 1
run two 2
check two 2

stop_etcd
echo "failover: the coordinator's node killed once and twice; each new coordinator went on from etcd's state (generation, restarts, failure history); both jobs ended with the losses of the run never killed"
