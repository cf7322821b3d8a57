#!/usr/bin/env bash
# A same-layout resume reads its file in chunks of 1 MiB, each checked by
# the state's CRC as it arrives: a file of more than one chunk resumes to
# the losses of a run never stopped, and prints the resume's time; a byte
# damaged at the chunk bound (the first chunk's last byte, the second's
# first) or the file's last byte is caught: the step is refused, naming
# its file, and the job resumes from the step before.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
chunk=$((1 << 20))
head=48 # libmsrun's header of a rank file
small=(--layers 2 --channels 64 --heads 4 --seq 16 --micro-batch 2 --steps 4)
train() {
    local job=ckchunk-$$-$RANDOM
    jobs_started+=("$job")
    timeout -k 5 50 "${msrun_cmd[@]}" --worker_num=1 --local_worker_num=1 --job_id="$job" \
        "${worker_env[@]}" "$bin/train_gpt" "${small[@]}" "$@"
}
train --loss-log "$work/whole" >/dev/null 2>"$work/err" || fail "whole: $(cat "$work/err")"
train --steps 2 --ckpt-every 1 --ckpt-dir "$work/ck" --loss-log "$work/first" >/dev/null \
    2>"$work/err" || fail "first part: $(cat "$work/err")"
file="$work/ck/step-2/rank-0.bin"
size=$(stat -c %s "$file")
((size > head + chunk + 1)) || fail "rank-0.bin holds $size bytes: not more than one chunk"
cp -r "$work/ck" "$work/pristine"
train --ckpt-dir "$work/ck" --resume --loss-log "$work/second" >/dev/null 2>"$work/err" ||
    fail "resumed: $(cat "$work/err")"
grep -q "train_gpt: resumed from step 2 under .* in [0-9]*\.[0-9]* s (saved by 1 ranks)$" \
    "$work/err" || fail "the resume line has no time: $(cat "$work/err")"
diff "$work/whole" <(cat "$work/first" "$work/second") ||
    fail "the resumed run differs from the uninterrupted one"
# damaged bytes: at the chunk bound, one past it, the last one
for at in $((head + chunk - 1)) $((head + chunk)) $((size - 1)); do
    rm -rf "$work/ck"
    cp -r "$work/pristine" "$work/ck"
    printf '\x5a' | dd of="$work/ck/step-2/rank-0.bin" bs=1 seek="$at" conv=notrunc status=none
    cmp -s "$work/ck/step-2/rank-0.bin" "$work/pristine/step-2/rank-0.bin" &&
        printf '\xa5' | dd of="$work/ck/step-2/rank-0.bin" bs=1 seek="$at" conv=notrunc status=none
    train --steps 3 --ckpt-dir "$work/ck" --resume >/dev/null 2>"$work/err" ||
        fail "byte $at damaged: no fallback: $(cat "$work/err")"
    grep -q "step-2/rank-0.bin does not match its CRC" "$work/err" ||
        fail "byte $at damaged: the file is not named: $(cat "$work/err")"
    grep -q "resumed from step 1 under" "$work/err" ||
        fail "byte $at damaged: not resumed from step 1: $(cat "$work/err")"
done
echo "chunked checkpoint loads: ok"
