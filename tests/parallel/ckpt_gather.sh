#!/usr/bin/env bash
# The checkpoint module's gathers on 2 workers under msrun: a rank out of
# memory for every rank's bytes (while the ranks look for the latest step,
# and while they save one) ends every rank with an error, itself saying
# so and the other naming it, none waiting for it; and a gather a rank
# never joins ends at its deadline with MSR_ERR_TIMEOUT.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
source "$(dirname "$0")/ckpt_worker_env.sh"
# run ARGS...: the worker on 2 ranks (ckpt_worker)
run() { ckpt_worker 2 40 ckpt_gather_worker "$@"; }
# no rank out of memory: both find step 1
run latest "$work/none" -1 || fail "latest, no failure: failed: $(cat "$work/log")"
said 0 "ok 1$" "latest, no failure"
said 1 "ok 1$" "latest, no failure"
for mode in latest save; do
    for nomem in 0 1; do
        other=$((1 - nomem))
        if run "$mode" "$work/$mode$nomem" "$nomem"; then
            fail "$mode, rank $nomem out of memory: the job succeeded: $(cat "$work/log")"
        fi
        said "$nomem" "failed: MSR_ERR_NO_MEMORY: .*rank $nomem is out of memory for 2 ranks'" \
            "$mode, rank $nomem out of memory"
        said "$other" "failed: .*rank $nomem gave 0 bytes" "$mode, rank $nomem out of memory"
    done
done
# a rank that never joins: the other's gather ends at its deadline
if run absent; then
    fail "absent: the job succeeded: $(cat "$work/log")"
fi
said 0 "failed: MSR_ERR_TIMEOUT" "absent"
said 1 "ok 0$" "absent"
echo "checkpoint gathers: ok"
