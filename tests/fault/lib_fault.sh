# Helpers of the fault suite (sourced after tests/integration/lib.sh).
#
# The job is gated (see fault_job.c): its ranks write their pids under
# $FAULT_GATE and hold before their last iteration until the test calls
# release, after its fault. So no fault can come after the job's end, however
# slow the machine, and the test finds its victims in the pid files instead
# of walking every process.
JOB=$BUILD/tests/fault_job
ITERS=${FAULT_ITERS:-300}
EVERY=10
SLEEP_MS=${FAULT_SLEEP_MS:-4}
export FAULT_GATE=$TMP/gate
# Every msrun of the test runs under a job id of its own, which names its
# shared-memory files (/dev/shm/msr-<job id>-...): no_shm_leftovers then
# counts this test's files only. Another test's unmapped files are not
# ours to report: tests/comm/shm_unique.sh holds msr-shmuniq-* files
# through its run, and a fault test that ran beside it (ctest -j2) failed.
export MSRUN_JOB_ID=fault-$$-$RANDOM
mkdir -p "$FAULT_GATE"
. "$MSRUN_SOURCE/tests/shm_files.sh"

# release: lets the job's ranks past the gate (its last iteration), of every
# generation from now on
release() { touch "$FAULT_GATE/release"; }

# job_pids GEN [RANK]: the pids the job's ranks of generation GEN published
# (of RANK only, if given); the files are written before the ranks' start
# lines, so after wait_started they are there
job_pids() {
    local f r=${2:-}
    for f in "$FAULT_GATE/g$1.r"${r:-*}".pid"; do
        [ -f "$f" ] && cat "$f"
    done
}

# The digest of a run without faults (one worker: the result does not depend
# on the world size).
reference_digest() {
    if [ ! -s "$TMP/ref.out" ]; then
        timeout 120 env MSRUN_TEST_MARKER="$MARKER" FAULT_GATE= "$MSRUN" --worker_num=1 --log_level=warn \
            "$JOB" "$TMP/ref.ck" "$ITERS" "$EVERY" 0 "$TMP/ref.out" >/dev/null 2>"$TMP/ref.err" ||
            { cat "$TMP/ref.err" >&2; fail "the reference run"; }
    fi
    cat "$TMP/ref.out"
}

# expect_digest FILE: the job's result equals the fault-free one.
expect_digest() {
    local want got
    want=$(reference_digest)
    got=$(cat "$1" 2>/dev/null)
    [ -n "$got" ] && [ "$got" = "$want" ] || fail "result '$got', want '$want'"
}

# pick WORDS...: one of its arguments at random (status 1 when there is
# none to pick from)
pick() {
    [ $# -gt 0 ] || return 1
    local a=("$@")
    echo "${a[$((RANDOM % ${#a[@]}))]}"
}

# wait_coordinator ADDR PORT [CMD...]: until a coordinator answers msrun
# status at ADDR:PORT (30 s), CMD (in_ns NS, say) prefixed to msrun; the
# job's token comes from the environment (use_token_file)
wait_coordinator() {
    local i addr=$1 port=$2
    shift 2
    for ((i = 0; i < 600; i++)); do
        "$@" "$MSRUN" status --master_addr "$addr" --master_port "$port" >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    fail "no coordinator answered at $addr:$port within 30 s"
}

# rand_delay LO HI: a random delay in seconds with millisecond precision
rand_delay() {
    python3 -c "import random; print('%.3f' % random.uniform($1, $2))"
}

# No shared-memory file of ours left in /dev/shm (tests/shm_files.sh): of
# msrun's, those of this test's job id; UCX's own carry no job to tell them
# apart, so all of those count
no_shm_leftovers() {
    local left
    left=$(stale_shm | grep -E "^(ucx_|msr-$MSRUN_JOB_ID-)" | tr '\n' ' ')
    [ -z "$left" ] || fail "$1: files left in /dev/shm: $left"
}

# wait_started N FILE: until N workers printed their start line
wait_started() {
    wait_count "^\[node [0-9]* rank [0-9]*\] start gen" "$2" "$1" 30 || fail "workers did not start"
}

# wait_formed N: until the N nodes' outputs ($TMP/n?.out) show generation 0
# started on all N ranks (30 s)
wait_formed() {
    local i pat="start gen 0 rank [0-9] of $1"
    for ((i = 0; i < 600; i++)); do
        [ "$(cat "$TMP"/n?.out | grep -c "$pat")" = "$1" ] && return 0
        sleep 0.05
    done
    fail "$1 nodes did not form generation 0 within 30 s"
}

# wait_checkpoint DIR: until a first checkpoint step is in DIR (10 s; the
# caller's fault comes after, whether or not one came)
wait_checkpoint() {
    local i
    for ((i = 0; i < 200; i++)); do
        compgen -G "$1/step-*" >/dev/null && return 0
        sleep 0.05
    done
    return 0
}

# first_gen_of W FILE: the first generation that FILE's start lines show on
# W ranks (empty when none)
first_gen_of() {
    sed -n "s/.*start gen \([0-9]*\) rank [0-9]* of $1 .*/\1/p" "$2" 2>/dev/null | head -n 1
}

# wait_gen_after G W FILE SECONDS: until FILE shows a start line of a
# generation after G on W ranks (a line of generation G or before, of an
# earlier world of the same size, does not count)
wait_gen_after() {
    local i
    for ((i = 0; i < $4 * 20; i++)); do
        sed -n "s/.*start gen \([0-9]*\) rank [0-9]* of $2 .*/\1/p" "$3" 2>/dev/null |
            awk -v g="$1" '$1 > g { f = 1 } END { exit !f }' && return 0
        sleep 0.05
    done
    return 1
}

# elastic_train STEPS [ARG...]: sets train to the train_gpt command of the
# elastic model-parallel tests (--auto --tp 2, STEPS steps, then ARGs), its
# cluster file in $TMP/cluster: a memory budget that leaves tp 2 x pp 3 on
# 6 ranks and tp 2 x pp 2 on 4
elastic_train() {
    cat >"$TMP/cluster" <<'CLUSTER'
ranks_per_node = 2
mem_gib = 0.0015
peak_tflops = 0.05
intra_gbs = 5
latency_us = 2
mem_gbs = 3
kernel_us = 0.2
cores_per_node = 2
CLUSTER
    train=("$BUILD/bin/train_gpt" --layers 6 --channels 32 --heads 4 --seq 16 --micro-batch 2
        --lr 3e-3 --steps "$1" --threads 1 --auto --tp 2 --cluster "$TMP/cluster" "${@:2}")
}
