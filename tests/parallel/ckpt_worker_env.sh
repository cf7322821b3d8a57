# Shared by the tests that start a checkpoint worker program under msrun
# (ckpt_agree.sh, ckpt_gather.sh, train_gpt_ckpt_bad.sh), after job_env.sh
# and job_test_setup:
#
#   ckpt_worker RANKS SECONDS WORKER ARGS...: tests/WORKER ARGS on RANKS
#   local workers, a job that job_test_cleanup stops; returns its exit
#   status, the ranks' lines in $work/log; fails when it runs past SECONDS
#   (a rank left waiting for another)
#   said RANK PATTERN WHAT: rank RANK's line in $work/log matches PATTERN
#   (an extended regular expression); else fails, saying WHAT
ckpt_worker() {
    local ranks=$1 seconds=$2 worker=$3 job=ckworker-$$-$RANDOM rc=0
    shift 3
    jobs_started+=("$job")
    timeout -k 5 "$seconds" "${msrun_cmd[@]}" --worker_num="$ranks" --local_worker_num="$ranks" \
        --job_id="$job" "${worker_env[@]}" "$MSRUN_BUILD/tests/$worker" "$@" >"$work/log" 2>&1 ||
        rc=$?
    kill_job "$job"
    [[ $rc -ne 124 && $rc -ne 137 ]] || fail "$worker $*: a rank waits: $(cat "$work/log")"
    return $rc
}
said() {
    grep -Eq "(^|\] )rank $1: $2" "$work/log" ||
        fail "$3: rank $1 does not say '$2': $(cat "$work/log")"
}
