# Shared by the out-of-memory tests (train_create_oom.sh,
# train_gpt_experts_oom.sh): job_env.sh's set-up ($work, removed at exit
# with the jobs started), $bin, ckpt_worker_env.sh's ckpt_worker, and a
# short deadline for the communicators (MSR_TIMEOUT: a rank left waiting
# would fail with MSR_ERR_TIMEOUT, and the script's limit would find a
# hang).
#
#   oom_worker_ok LABEL SUMMARY OKLINE: the worker's lines in $work/log
#   hold no FAIL, a line matching SUMMARY (an extended regular expression)
#   and OKLINE; else fails, naming LABEL
bin="$MSRUN_BUILD/bin"
source "$(dirname "${BASH_SOURCE[0]}")/job_env.sh"
job_test_setup
source "$(dirname "${BASH_SOURCE[0]}")/ckpt_worker_env.sh"
export MSR_TIMEOUT=20

oom_worker_ok() {
    local label=$1 summary=$2 okline=$3
    ! grep -q "FAIL" "$work/log" || fail "$label: $(grep FAIL "$work/log")"
    grep -Eq "$summary" "$work/log" || fail "$label: no summary: $(tail -20 "$work/log")"
    grep -q "$okline" "$work/log" || fail "$label: not ok: $(tail -20 "$work/log")"
}
