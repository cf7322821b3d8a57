#!/bin/bash
# Coordinator failover through etcd (--rdzv_backend=etcd): 3 msrun on
# loopback train train_gpt with checkpoints. The msrun whose lease holds
# /msrun/<job>/leader is killed with SIGKILL together with its coordinator
# child mid-training and a replacement node is started (the job's size is
# fixed, 3): another node is elected, starts a coordinator that resumes the
# job from etcd, the nodes follow it, the job restarts from its last
# checkpoint and ends with exactly the losses of a run never killed. Then
# the same with two kills. The job's keys are gone from etcd at the end.
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/integration/etcd_lib.sh"
start_etcd
export MSRUN_TOKEN="failover-$RANDOM$RANDOM"
steps=120
args=(--layers 2 --channels 32 --heads 4 --seq 16 --micro-batch 2 --zero 0
    --steps $steps --ckpt-every 5 --ckpt-keep 2 --resume)

# node JOB DIR N: one msrun of job JOB (output in DIR/nN.log)
node() {
    env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --rdzv_backend=etcd --rdzv_endpoint="$ETCD_EP" \
        --rdzv_id="$1" --nnodes=3 --local_worker_num=1 --max_restarts=3 --etcd_lease=1 \
        --heartbeat_interval=0.3 --node_timeout=1.5 --cluster_time_out=60 \
        "$BUILD/bin/train_gpt" "${args[@]}" --ckpt-dir "$2/ck" --loss-log "$2/loss.log" \
        >"$2/n$3.log" 2>&1 &
    PIDS+=($!)
}

# run JOB KILLS: the job on 3 nodes, its coordinator's node killed KILLS times
run() {
    local job=$1 kills=$2 dir="$TMP/$1" k i
    mkdir -p "$dir"
    PIDS=()
    for i in 0 1 2; do node "$job" "$dir" "$i"; done
    for ((k = 1; k <= kills; k++)); do
        # once a checkpoint later than the last kill's is complete
        local want=$((k * 25))
        for ((i = 0; i < 600; i++)); do
            [ -f "$dir/loss.log" ] && [ "$(wc -l <"$dir/loss.log")" -ge "$want" ] && break
            sleep 0.1
        done
        [ "$(wc -l <"$dir/loss.log" 2>/dev/null || echo 0)" -ge "$want" ] ||
            fail "$job: training did not reach step $want before kill $k"
        local coord= agent
        # the coordinator of the moment (a failover may be under way: wait)
        for ((i = 0; i < 300; i++)); do
            coord=$(pgrep -f "msrun coordinator .*--etcd_prefix /msrun/$job " | head -1)
            [ -n "$coord" ] && break
            sleep 0.1
        done
        [ -n "$coord" ] || fail "$job: no coordinator to kill within 30 s"
        agent=$(ps -o ppid= -p "$coord" | tr -d ' ')
        kill -9 "$agent" "$coord"
        echo "kill $k: msrun $agent and its coordinator $coord"
        node "$job" "$dir" "r$k" # the replacement of the lost node
    done
    local rc=0 p
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
    grep -q "the coordinator is now at" "$dir"/n*.log || fail "$1: no node followed"
    grep -q -E "resumed from step [0-9]*[05] under" "$dir"/n*.log ||
        fail "$1: no resume from a checkpoint"
    [ -z "$(etcd_get --prefix "/msrun/$1" --keys-only)" ] || fail "$1: keys left in etcd"
}
run one 1
check one
run two 2
check two

stop_etcd
echo "failover: the coordinator's node killed once and twice; both jobs ended with the losses of the run never killed"
