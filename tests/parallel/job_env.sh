# Shared by the parallel tests that start msrun: the command line and
# environment for msrun and its workers, and a way to end a job's processes.
# Expects MSRUN_BUILD; reads MSRUN_SANITIZE (set by CTest for sanitizer
# builds).
#
#   "${msrun_cmd[@]}" --worker_num=N ... "${worker_env[@]}" PROGRAM ARGS...
#   kill_job JOB_ID
msrun_cmd=(env "$MSRUN_BUILD/bin/msrun")
worker_env=()
if [[ -n "${MSRUN_SANITIZE:-}" ]]; then
    # UCX must not hook malloc/mmap under AddressSanitizer (they would fight
    # over the same symbols). Leaks are checked in the workers (this module's
    # code); msrun's own are the launcher's business.
    export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_EVENTS=no
    worker_env=(env "ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}")
    msrun_cmd=(env "ASAN_OPTIONS=detect_leaks=0" "$MSRUN_BUILD/bin/msrun")
fi

# Kills whatever is left of job $1 (found by the job id in its environment).
kill_job() {
    local p
    for p in $(grep -lsa "MSR_JOB_ID=$1" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3); do
        [[ "$p" != "$$" ]] && kill -KILL "$p" 2>/dev/null
    done
    return 0
}

# The usual start of a job test: a directory $work, removed at exit with
# every job named in jobs_started stopped first, and fail MESSAGE (which
# also prints the file fail_log names, when a test sets it).
job_test_setup() {
    work=$(mktemp -d)
    jobs_started=()
    trap job_test_cleanup EXIT
}
job_test_cleanup() {
    local j
    for j in "${jobs_started[@]}"; do kill_job "$j"; done
    rm -rf "$work"
}
fail() {
    echo "FAIL: $*" >&2
    [[ -z "${fail_log:-}" ]] || cat "$fail_log" >&2 2>/dev/null || true
    exit 1
}
