# Helpers of the fault suite (sourced after tests/integration/lib.sh).
JOB=$BUILD/tests/fault_job
ITERS=${FAULT_ITERS:-300}
EVERY=10
SLEEP_MS=${FAULT_SLEEP_MS:-4}
SHM_BEFORE=$(ls /dev/shm 2>/dev/null | sort)

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

# pick WORDS...: one of its arguments at random
pick() {
    local a=("$@")
    echo "${a[$((RANDOM % ${#a[@]}))]}"
}

# rand_ms LO HI: a random delay in seconds with millisecond precision
rand_delay() {
    python3 -c "import random; print('%.3f' % random.uniform($1, $2))"
}

# No file left in /dev/shm that was not there when the test started.
no_shm_leftovers() {
    local now new
    now=$(ls /dev/shm 2>/dev/null | sort)
    new=$(comm -13 <(echo "$SHM_BEFORE") <(echo "$now"))
    [ -z "$new" ] || fail "$1: files left in /dev/shm: $new"
}

# wait_started N FILE: until N workers printed their start line
wait_started() {
    wait_count "^\[node [0-9]* rank [0-9]*\] start gen" "$2" "$1" 30 || fail "workers did not start"
}
