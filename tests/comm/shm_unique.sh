#!/usr/bin/env bash
# Shared-memory segments of two runs that share a job id (docs/security.md):
# each run's communicators still get their own segment. Checks the path
# taken in the workers' debug log ("N ranks share a ... segment").
# (MSRUN_BUILD: the build dir)
set -u
build=${MSRUN_BUILD:?MSRUN_BUILD is not set}
msrun=$build/bin/msrun
worker=$build/tests/comm_worker
job=shmuniq-$$-$RANDOM
out=$(mktemp -d)
. "$(dirname "$0")/../shm_files.sh"
planted=()

cleanup() {
    local p f
    for p in $(grep -lsa "MSR_JOB_ID=$job" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3); do
        [ "$p" != "$$" ] && kill -KILL "$p" 2>/dev/null
    done
    for f in "${planted[@]}"; do rm -f "/dev/shm/$f"; done
    for f in $(stale_shm); do rm -f "/dev/shm/$f"; done
    rm -rf "$out"
}
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { cleanup; }' EXIT

failed() {
    echo "FAIL: $*"
    for f in "$out"/log*; do
        echo "---- $(basename "$f")"
        tail -n 20 "$f"
    done
    exit 1
}

# run_job LOG: a 2-rank job of $job in the background; its pid in $!
run_job() {
    MSR_LOG_LEVEL=debug timeout -k 5 90 "$msrun" --worker_num=2 --job_id="$job" --grace_period=5 \
        "$worker" samecomm >"$1" 2>&1 &
}

# check LOG WHAT: both ranks used a shared-memory segment, none fell back
check() {
    grep -q "ok samecomm" "$1" || failed "$2: rank 0 did not report ok"
    for r in 0 1; do
        grep -q "rank $r\] .*ranks share a .*segment" "$1" ||
            failed "$2: rank $r did not use shared memory"
    done
    ! grep -q "no shared-memory segment\|cannot map" "$1" ||
        failed "$2: a communicator fell back: $(grep -m1 'no shared-memory segment\|cannot map' "$1")"
}

# 1. names another run of this job id holds (the names the first
#    communicators of a run got when they held only the job id): this run
#    must not depend on them being free
for e in w0 w1 w2; do
    for c in 0 1 2 3; do
        f="msr-$job-g0-$e-$c-0"
        if (umask 077 && : >"/dev/shm/$f"); then planted+=("$f"); fi
    done
done
[ ${#planted[@]} -gt 0 ] || failed "cannot create files in /dev/shm"
run_job "$out/log1"
wait $! || failed "the job beside the held names exited $?"
check "$out/log1" "names held by another run of the job id"
echo "ok: a run whose job id's segment names are taken still uses shared memory"

# 2. two runs of the same job id at once
run_job "$out/log2a"
a=$!
run_job "$out/log2b"
b=$!
wait $a || failed "run A exited $?"
wait $b || failed "run B exited $?"
check "$out/log2a" "run A"
check "$out/log2b" "run B"
echo "ok: two runs with the same job id at once both use shared memory"
left=$(stale_shm | grep -v "^msr-$job-g0-w[012]-[0-3]-0$")
[ -z "$left" ] || failed "segments left in /dev/shm: $left"
echo "PASS: shm_unique"
