#!/bin/bash
# Every worker gets the environment of DESIGN.md section 4.
. "$(dirname "$0")/lib.sh"

run_msrun --worker_num=4 --local_worker_num=4 --job_id=envjob --max_restarts=2 "$WORKER" env
expect_code 0 "env job"
for r in 0 1 2 3; do
    for kv in "MSR_RANK=$r" "RANK=$r" "LOCAL_RANK=$r" "MSR_LOCAL_RANK=$r" "MSR_WORLD_SIZE=4" \
        "WORLD_SIZE=4" "LOCAL_WORLD_SIZE=4" "MSR_LOCAL_WORLD_SIZE=4" "MSR_NODE_RANK=0" \
        "GROUP_RANK=0" "MSR_NODE_COUNT=1" "MSR_GENERATION=0" "MSR_JOB_ID=envjob" \
        "TORCHELASTIC_RUN_ID=envjob" "TORCHELASTIC_RESTART_COUNT=0" \
        "TORCHELASTIC_MAX_RESTARTS=2" "MASTER_ADDR=127.0.0.1" "OMP_NUM_THREADS=1" \
        "MSR_TOKEN_SET=1"; do
        expect_in "^\[node 0 rank $r\] ENV $r $kv\$" "$TMP/out" "rank $r"
    done
    expect_in "^\[node 0 rank $r\] ENV $r MASTER_PORT=[1-9][0-9]*\$" "$TMP/out" "rank $r port"
    expect_in "^\[node 0 rank $r\] ENV $r MSR_COORDINATOR=127.0.0.1:[1-9][0-9]*\$" "$TMP/out" \
        "rank $r coordinator"
    expect_in "^\[node 0 rank $r\] CTX $r rank=$r world=4 local=$r/4 node=0/1 gen=0 job=envjob\$" \
        "$TMP/out" "rank $r context"
done
# every rank sees the same MASTER_PORT
[ "$(grep -o 'MASTER_PORT=[0-9]*' "$TMP/out" | sort -u | wc -l)" = 1 ] || fail "MASTER_PORT differs"
ok "variables of every rank"

# a user's OMP_NUM_THREADS is kept; MSRUN_* variables act as options
CODE=0
timeout 60 env MSRUN_TEST_MARKER="$MARKER" OMP_NUM_THREADS=3 MSRUN_WORKER_NUM=2 \
    MSRUN_LOCAL_WORKER_NUM=2 "$MSRUN" "$WORKER" env >"$TMP/out" 2>"$TMP/err" || CODE=$?
expect_code 0 "env variables as options"
expect_in "ENV 1 OMP_NUM_THREADS=3" "$TMP/out" "OMP_NUM_THREADS kept"
expect_in "ENV 1 WORLD_SIZE=2" "$TMP/out" "MSRUN_WORKER_NUM read"
expect_not_in "ENV 2 " "$TMP/out" "only two ranks"
ok "OMP_NUM_THREADS kept, MSRUN_* read"

# torchrun's spellings are accepted
run_msrun --nproc-per-node 3 --rdzv-id=tr "$WORKER" env
expect_code 0 "torchrun spellings"
expect_in "ENV 2 WORLD_SIZE=3" "$TMP/out" "--nproc-per-node"
expect_in "ENV 0 MSR_JOB_ID=tr" "$TMP/out" "--rdzv-id"
ok "torchrun spellings"
no_leftovers "env"
