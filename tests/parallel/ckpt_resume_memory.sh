#!/usr/bin/env bash
# A same-layout resume holds no copy of the whole state: it reads its
# payload a piece at a time (one piece's buffer, at most 12 MiB) straight
# from the file, checking each piece and then the file's CRC as it reads.
# A run that only resumes (the checkpoint's step is its last: nothing to
# train or save) peaks below a run that trains one step from scratch plus
# 16 MiB; holding the whole state (57 MB here) would not.
set -euo pipefail
if [[ -n "${MSRUN_SANITIZE:-}" ]]; then
    # the sanitizer's shadow and quarantine, not the program, set the peak
    echo "skipped: peak memory is not the program's under MSRUN_SANITIZE=$MSRUN_SANITIZE"
    exit 77
fi
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
model=(--layers 6 --channels 256 --heads 4 --seq 16 --micro-batch 1 --threads 1 --report)
train() {
    local job=ckmem-$$-$RANDOM
    jobs_started+=("$job")
    timeout -k 5 50 "${msrun_cmd[@]}" --worker_num=1 --local_worker_num=1 --job_id="$job" \
        "${worker_env[@]}" "$bin/train_gpt" "${model[@]}" --steps 1 "$@"
}
peak() { sed -n 's/.*peak RSS \([0-9]*\) KiB.*/\1/p' "$1" | head -1; }
train >/dev/null 2>"$work/fresh" || fail "fresh run: $(cat "$work/fresh")"
train --ckpt-dir "$work/ck" >/dev/null 2>"$work/save" || fail "saving run: $(cat "$work/save")"
train --ckpt-dir "$work/ck" --resume >/dev/null 2>"$work/resume" ||
    fail "resumed run: $(cat "$work/resume")"
grep -q "resumed from step 1 under" "$work/resume" || fail "not resumed: $(cat "$work/resume")"
state=$(stat -c %s "$work/ck/step-1/rank-0.bin")
fresh=$(peak "$work/fresh")
resumed=$(peak "$work/resume")
[[ -n $fresh && -n $resumed ]] || fail "no peak RSS in the reports: $(cat "$work/resume")"
limit=$((fresh + 16384))
((resumed <= limit)) ||
    fail "the resume peaked at $resumed KiB, over $limit KiB (a fresh run's $fresh + 16 MiB; the state is $((state / 1024)) KiB)"
echo "resume memory: peak $resumed KiB, fresh run $fresh KiB, state $((state / 1024)) KiB: ok"
