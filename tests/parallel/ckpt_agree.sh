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
source "$(dirname "$0")/ckpt_worker_env.sh"
# run FLAGS NOMEM: the worker on 2 ranks (ckpt_worker)
run() { ckpt_worker 2 30 ckpt_agree_worker "$@"; }
expect_first() { # FLAGS FIRST: both ranks say FIRST
    run "$1" -1 || fail "flags '$1': failed: $(cat "$work/log")"
    for r in 0 1; do
        said $r "first $2$" "flags '$1'"
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
    said "$nomem" "failed: .*rank $nomem is out of memory for 2 flags" \
        "rank $nomem out of memory"
    said "$other" "failed: .*rank $nomem gave 0 bytes" "rank $nomem out of memory"
done
echo "checkpoint load agreement: ok"
