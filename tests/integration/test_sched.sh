#!/bin/bash
# Schedulers as sources of msrun's settings: Slurm's variables as srun sets
# them (with a fake scontrol that knows the nodes' NodeAddr), Kubernetes'
# (an Indexed Job, Kubeflow's PyTorchJob), --dry_run's report, explicit
# options winning, the refusal of several msrun per node, a 2-node job
# that needs no option but the workers per node, and a node that hosts the
# coordinator on 0.0.0.0 for a master address it cannot resolve (index 0 of
# an Indexed Job, or --coordinator_here=true without a scheduler).
. "$(dirname "$0")/lib.sh"

# Slurm's node names n1, n2 do not resolve; scontrol knows their NodeAddr.
mkdir -p "$TMP/bin"
cat >"$TMP/bin/scontrol" <<'SH'
#!/bin/sh
[ "$1 $2" = "show node" ] || exit 1
case "$3" in
n1|n2) printf 'NodeName=%s Arch=x86_64 CoresPerSocket=1\n   NodeAddr=127.0.0.1 NodeHostName=vm Version=22.05\n' "$3" ;;
*) echo "Node $3 not found" >&2; exit 1 ;;
esac
SH
chmod +x "$TMP/bin/scontrol"

# the variables srun -N2 --ntasks-per-node=1 sets (Slurm 22.05), for node $1
# of job $2
srun_env() {
    echo SLURM_JOB_ID=$2 SLURM_JOBID=$2 SLURM_STEP_ID=0 SLURM_STEPID=0 SLURM_NODEID=$1 \
        SLURM_PROCID=$1 SLURM_LOCALID=0 SLURM_NNODES=2 SLURM_JOB_NUM_NODES=2 \
        SLURM_STEP_NUM_NODES=2 SLURM_NTASKS=2 SLURM_STEP_NUM_TASKS=2 SLURM_NTASKS_PER_NODE=1 \
        SLURM_TASKS_PER_NODE='1(x2)' SLURM_JOB_NODELIST='n[1-2]' SLURM_NODELIST='n[1-2]' \
        SLURM_STEP_NODELIST='n[1-2]'
}

# value NAME: the value --dry_run printed for NAME; line NAME: its whole line
value() { sed -n "s/^$1 = \([^ ]*\) (.*/\1/p" "$TMP/out"; }
line() { grep "^$1 = " "$TMP/out"; }
expect_line() {
    [ "$(line "$1")" = "$1 = $2" ] || fail "$3: '$(line "$1")', want '$1 = $2'"
}

# no scheduler: today's standalone job, and nothing started
run_msrun --dry_run --worker_num=2 "$WORKER" exit 0
expect_code 0 "--dry_run without a scheduler"
expect_line scheduler "none (default: no Slurm or Kubernetes variables)" "no scheduler"
expect_line master_addr "none (default: a standalone job on this host)" "standalone"
expect_line worker_num "2 (option: --worker_num)" "worker_num's origin"
expect_line local_worker_num "2 (derived: worker_num / nnodes)" "local_worker_num's origin"
[ "$(grep -c ' = .* (.*)$' "$TMP/out")" = "$(wc -l <"$TMP/out")" ] ||
    fail "every line of --dry_run is 'name = value (source)'"
[ ! -s "$TMP/err" ] || fail "--dry_run said something on stderr"
no_leftovers "--dry_run"
ok "--dry_run without a scheduler: today's settings, one 'name = value (source)' a line"

# srun -N2 --ntasks-per-node=1, node 1: everything from Slurm
CODE=0
env PATH="$TMP/bin:$PATH" $(srun_env 1 4242) MSRUN_TEST_MARKER="$MARKER" \
    timeout -k 5 60 "$MSRUN" --dry_run --local_worker_num=2 "$WORKER" exit 0 \
    >"$TMP/out" 2>"$TMP/err" || CODE=$?
expect_code 0 "--dry_run under srun"
expect_line scheduler "slurm (slurm: SLURM_JOB_ID is set)" "Slurm seen"
expect_line node_rank "1 (slurm: SLURM_NODEID)" "node rank"
expect_line nnodes "2 (slurm: SLURM_STEP_NUM_NODES)" "node count"
expect_line master_addr "127.0.0.1 (slurm: NodeAddr of n1, the first host of SLURM_STEP_NODELIST)" \
    "master address"
expect_line master_port "24242 (slurm: 20000 + SLURM_JOB_ID mod 10000)" "master port"
expect_line coordinator_here "false (slurm: node rank 1)" "node 1 does not host it"
expect_line worker_num "4 (derived: local_worker_num x nnodes)" "world size"
expect_line job_id "slurm-4242 (slurm: SLURM_JOB_ID)" "job id"
expect_line auth "munge (slurm: no token given: munge credentials)" "no token: munge"
ok "srun's variables: rank, nodes, NodeAddr of the first host, port, job id, munge"

# explicit options and MSRUN_* win over Slurm
CODE=0
env PATH="$TMP/bin:$PATH" $(srun_env 0 4242) MSRUN_NODE_RANK=1 MSRUN_TOKEN=abc \
    MSRUN_TEST_MARKER="$MARKER" timeout -k 5 60 "$MSRUN" --dry_run --master_addr=localhost \
    --master_port=9999 --job_id=mine --nnodes=2 --local_worker_num=3 --coordinator_here=false \
    "$WORKER" exit 0 >"$TMP/out" 2>"$TMP/err" || CODE=$?
expect_code 0 "--dry_run with options under srun"
expect_line node_rank "1 (env: MSRUN_NODE_RANK)" "MSRUN_NODE_RANK wins"
expect_line nnodes "2 (option: --nnodes)" "--nnodes wins"
expect_line master_addr "localhost (option: --master_addr)" "--master_addr wins"
expect_line master_port "9999 (option: --master_port)" "--master_port wins"
expect_line job_id "mine (option: --job_id)" "--job_id wins"
expect_line coordinator_here "false (option: --coordinator_here)" "--coordinator_here wins"
expect_line auth "token (env: MSRUN_TOKEN)" "a token given: no munge"
ok "explicit options and MSRUN_* variables override Slurm"

# srun -n4 on 2 nodes (two msrun per node) is refused with the right command
CODE=0
env PATH="$TMP/bin:$PATH" $(srun_env 0 4242) SLURM_NTASKS=4 SLURM_STEP_NUM_TASKS=4 \
    SLURM_LOCALID=1 MSRUN_TEST_MARKER="$MARKER" timeout -k 5 60 "$MSRUN" "$WORKER" exit 0 \
    >"$TMP/out" 2>"$TMP/err" || CODE=$?
expect_code 2 "srun -n4 on 2 nodes"
expect_in "srun -N2 --ntasks-per-node=1 msrun" "$TMP/err" "the refusal says what to run"
[ "$(wc -l <"$TMP/err")" = 1 ] || fail "the refusal is one line"
no_leftovers "refused"
# in a batch script (no step) of 2 nodes only one msrun would start
CODE=0
env SLURM_JOB_ID=77 SLURM_NODEID=0 SLURM_NNODES=2 SLURM_JOB_NODELIST='n[1-2]' \
    MSRUN_TEST_MARKER="$MARKER" timeout -k 5 60 "$MSRUN" "$WORKER" exit 0 \
    >"$TMP/out" 2>"$TMP/err" || CODE=$?
expect_code 2 "msrun in a 2-node batch script without srun"
expect_in "outside srun" "$TMP/err" "the batch-script refusal"
# a master that resolves neither by DNS nor by scontrol
CODE=0
env PATH="$TMP/bin:$PATH" $(srun_env 1 4242) SLURM_STEP_NODELIST='zz[1-2]' \
    MSRUN_TEST_MARKER="$MARKER" timeout -k 5 60 "$MSRUN" --dry_run "$WORKER" exit 0 \
    >"$TMP/out" 2>"$TMP/err" || CODE=$?
expect_code 2 "an unknown master host"
expect_in "zz1 (the first host of SLURM_STEP_NODELIST)" "$TMP/err" "names the host"
ok "several msrun per node, a batch script and an unknown master are refused (exit 2)"

# A 2-node job under srun's variables: no option but the workers per node
# (a token in the environment, as srun propagates it). The job id picks the
# port: find one whose port is free.
use_token_file
for id in $(seq $((RANDOM % 5000 + 1000)) 9999); do
    python3 -c "import socket,sys; s=socket.socket(); s.bind(('0.0.0.0',20000+$id%10000))" \
        2>/dev/null && break
done
for r in 0 1; do
    env PATH="$TMP/bin:$PATH" $(srun_env $r $id) MSRUN_TEST_MARKER="$MARKER" \
        "$MSRUN" --local_worker_num=2 "$WORKER" env >"$TMP/n$r.out" 2>"$TMP/n$r.err" &
    eval "pid$r=\$!"
done
wait_pid "$pid0" 60
expect_code 0 "node 0 under srun"
wait_pid "$pid1" 60
expect_code 0 "node 1 under srun"
for rank in 0 1 2 3; do
    node=$((rank / 2))
    expect_in "ENV $rank MSR_WORLD_SIZE=4" "$TMP/n$node.out" "rank $rank's world"
    expect_in "ENV $rank MSR_NODE_RANK=$node" "$TMP/n$node.out" "rank $rank's node"
    expect_in "ENV $rank MSR_JOB_ID=slurm-$id" "$TMP/n$node.out" "rank $rank's job id"
done
expect_in "ENV 2 MSR_COORDINATOR=127.0.0.1:$((20000 + id % 10000))" "$TMP/n1.out" \
    "node 1 reaches the coordinator at n1's NodeAddr"
no_leftovers "2-node job under srun"
ok "srun -N2 --ntasks-per-node=1 msrun --local_worker_num=2: a 4-rank job, nothing else given"

# Kubeflow's PyTorchJob
CODE=0
env PET_NNODES=4 PET_NODE_RANK=3 PET_NPROC_PER_NODE=2 PET_MASTER_ADDR=job-master-0 \
    PET_MASTER_PORT=23456 MASTER_ADDR=job-master-0 MASTER_PORT=23456 \
    MSRUN_TEST_MARKER="$MARKER" timeout -k 5 60 "$MSRUN" --dry_run "$WORKER" exit 0 \
    >"$TMP/out" 2>"$TMP/err" || CODE=$?
expect_code 0 "--dry_run under a PyTorchJob"
expect_line scheduler "kubernetes (kubernetes: its variables are set)" "Kubernetes seen"
expect_line node_rank "3 (kubernetes: PET_NODE_RANK)" "PET_NODE_RANK"
expect_line nnodes "4 (kubernetes: PET_NNODES)" "PET_NNODES"
expect_line master_addr "job-master-0 (kubernetes: PET_MASTER_ADDR)" "PET_MASTER_ADDR"
expect_line master_port "23456 (kubernetes: PET_MASTER_PORT)" "PET_MASTER_PORT"
expect_line local_worker_num "2 (kubernetes: PET_NPROC_PER_NODE)" "PET_NPROC_PER_NODE"
expect_line worker_num "8 (derived: local_worker_num x nnodes)" "world size"
ok "Kubeflow's PET_* variables"

# hosted_anywhere NAME ENV0 ARGS0 ENV1 ARGS1: a 2-node job whose node 0 (its
# environment ENV0, options ARGS0) has a master address it cannot resolve
# (a Service's, say), yet hosts the coordinator on 0.0.0.0 without the
# is-local test (seen with ss before node 1 starts); node 1 reaches it
# through 127.0.0.1.
hosted_anywhere() {
    local port i bound r addr envs=("$2" "$4") args=("$3" "$5")
    port=$(free_port)
    for r in 0 1; do
        addr=unresolvable-job-0.msrun-test.invalid
        [ $r = 1 ] && addr=127.0.0.1
        # shellcheck disable=SC2086 # ENVr and ARGSr: words
        env ${envs[$r]} MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --nnodes=2 --local_worker_num=1 \
            --master_addr=$addr --master_port="$port" ${args[$r]} "$WORKER" env \
            >"$TMP/k$r.out" 2>"$TMP/k$r.err" &
        eval "pid$r=\$!"
        [ $r = 0 ] || continue
        for ((i = 0; i < 200; i++)); do
            bound=$(ss -Hltn "sport = :$port" | awk '{print $4}')
            [ -n "$bound" ] && break
            sleep 0.05
        done
        [ "$bound" = "0.0.0.0:$port" ] || fail "$1: node 0's coordinator listens on '$bound'"
    done
    wait_pid "$pid0" 60
    expect_code 0 "$1: node 0 hosts the coordinator"
    wait_pid "$pid1" 60
    expect_code 0 "$1: node 1 joins it"
    expect_in "ENV 1 MSR_NODE_RANK=1" "$TMP/k1.out" "$1: node 1's rank"
    expect_in "ENV 0 MSR_COORDINATOR=127.0.0.1:$port" "$TMP/k0.out" "$1: node 0 reaches it on loopback"
    expect_in "ENV 1 MSR_COORDINATOR=127.0.0.1:$port" "$TMP/k1.out" "$1: node 1 reaches it through 127.0.0.1"
    no_leftovers "$1"
}
# An Indexed Job: JOB_COMPLETION_INDEX is the node rank, and index 0 hosts it
hosted_anywhere "Indexed Job" JOB_COMPLETION_INDEX=0 "" JOB_COMPLETION_INDEX=1 ""
ok "JOB_COMPLETION_INDEX=0 hosts the coordinator on 0.0.0.0 without the is-local test"
# No scheduler: --coordinator_here=true does the same
hosted_anywhere "--coordinator_here" "" "--coordinator_here=true --node_rank=0" "" "--node_rank=1"
ok "--coordinator_here=true without a scheduler hosts it on 0.0.0.0; node 1 joins through 127.0.0.1"
