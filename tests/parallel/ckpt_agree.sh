#!/usr/bin/env bash
# The ranks' agreement after a checkpoint load (msr_tckpt_agree_first,
# which train_gpt's resume takes to learn whether any rank found its file
# damaged), on 2 workers under msrun: every rank learns the lowest rank
# whose flag is set; and when one rank cannot allocate the flags, every
# rank ends with an error naming that rank, none waiting for it.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
# run FLAGS NOMEM: the job's exit status; its ranks' lines in $work/log
run() {
    local job=ckagree-$$-$RANDOM rc=0
    jobs_started+=("$job")
    timeout -k 5 30 "${msrun_cmd[@]}" --worker_num=2 --local_worker_num=2 --job_id="$job" \
        "${worker_env[@]}" "$MSRUN_BUILD/tests/ckpt_agree_worker" "$@" >"$work/log" 2>&1 || rc=$?
    kill_job "$job"
    [[ $rc != 124 && $rc != 137 ]] || fail "flags '$1', rank $2 out of memory: a rank waits"
    return $rc
}
expect_first() { # FLAGS FIRST: both ranks say FIRST
    run "$1" -1 || fail "flags '$1': failed: $(cat "$work/log")"
    for r in 0 1; do
        grep -Eq "(^|\] )rank $r: first $2$" "$work/log" ||
            fail "flags '$1': rank $r does not say first $2: $(cat "$work/log")"
    done
}
expect_first "" -1
expect_first 0 0
expect_first 1 1
expect_first 01 0
# a rank out of memory for the flags: every rank fails, naming it
for nomem in 0 1; do
    other=$((1 - nomem))
    if run 1 "$nomem"; then
        fail "rank $nomem out of memory: the job succeeded: $(cat "$work/log")"
    fi
    grep -Eq "(^|\] )rank $nomem: failed: .*rank $nomem is out of memory for 2 flags" "$work/log" ||
        fail "rank $nomem out of memory: it does not say so: $(cat "$work/log")"
    grep -Eq "(^|\] )rank $other: failed: .*rank $nomem gave 0 bytes" "$work/log" ||
        fail "rank $nomem out of memory: rank $other does not name it: $(cat "$work/log")"
done
echo "checkpoint load agreement: ok"
