# Helpers of the fault suite (sourced after tests/integration/lib.sh).
JOB=$BUILD/tests/fault_job
ITERS=${FAULT_ITERS:-300}
EVERY=10
SLEEP_MS=${FAULT_SLEEP_MS:-4}
. "$MSRUN_SOURCE/tests/shm_files.sh"

# The digest of a run without faults (one worker: the result does not depend
# on the world size).
reference_digest() {
    if [ ! -s "$TMP/ref.out" ]; then
        timeout 120 env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --worker_num=1 --log_level=warn \
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

# Pids of this test's processes whose command line contains PATTERN.
pids_of() {
    local p
    for p in $(leftovers); do
        tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "$1" && echo "$p"
    done
}

# Pids of this test's workers: processes whose program (argv[0]) is the job.
worker_pids() {
    local p a0
    for p in $(leftovers); do
        a0=$(tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | head -n 1)
        [ "${a0##*/}" = fault_job ] && echo "$p"
    done
}

# pick WORDS...: one of its arguments at random
pick() {
    local a=("$@")
    echo "${a[$((RANDOM % ${#a[@]}))]}"
}

# rand_ms LO HI: a random delay in seconds with millisecond precision
rand_delay() {
    python3 -c "import random; print('%.3f' % random.uniform($1, $2))"
}

# No shared-memory file of ours left in /dev/shm (tests/shm_files.sh).
no_shm_leftovers() {
    local left
    left=$(stale_shm | tr '\n' ' ')
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
