#!/usr/bin/env bash
# train_gpt in an elastic job (docs/checkpoint.md "Elastic jobs"): the same
# command line, without --global-batch, resumes a checkpoint of 2 ranks on
# 4 and on 1 with the checkpoint's global batch (rank 0 says so, the
# accumulation follows), and the steps after the resume are those of the
# run that never stopped (1e-5 relative); with nothing saved it starts at
# step 0 with the command line's batch; a --global-batch other than the
# checkpoint's is refused (exit 2, both shown), and so is a world the
# checkpoint's batch does not divide among, and a rank-0 shard cut short
# (exit 2, the file named); none of them trains a step.
set -euo pipefail
source "$(dirname "$0")/job_env.sh"
job_test_setup
# the command, the options every msrun_n and refuse start with
# (job_env.sh): micro-batch 2 x accum 2 x dp 2 = global batch 8 on 2 ranks;
# the same command gives 16 on 4 ranks and 4 on 1 when nothing is saved
train_args=(--layers 2 --channels 32 --heads 4 --seq 16 --micro-batch 2 --grad-accum 2 --lr 3e-3
    --ckpt-every 3 --resume)
job_prefix=elastic

# nothing saved: the command line's batch, step 0 (4 ranks: global batch 16)
msrun_n 4 --steps 1 --ckpt-dir "$work/fresh" >"$work/out" 2>"$work/err" ||
    fail "fresh start: $(cat "$work/err")"
grep -q "no complete checkpoint under .*, starting at step 0" "$work/err" ||
    fail "fresh start: $(cat "$work/err")"
! grep -q "checkpoint's global batch" "$work/err" || fail "fresh start took a batch: $(cat "$work/err")"

# the run that never stops, 6 steps on 2 ranks; and one stopped at step 3
msrun_n 2 --steps 6 --ckpt-dir "$work/whole" --loss-log "$work/whole.log" >/dev/null \
    2>"$work/err" || fail "uninterrupted: $(cat "$work/err")"
msrun_n 2 --steps 3 --ckpt-dir "$work/ck" >/dev/null 2>"$work/err" || fail "first 3: $(cat "$work/err")"
[[ -f "$work/ck/step-3/MANIFEST" ]] || fail "no step 3: $(ls -R "$work/ck")"
tail -n 3 "$work/whole.log" >"$work/want"

# the same command on 4 ranks and on 1: the checkpoint's batch of 8
for n in 4 1; do
    cp -r "$work/ck" "$work/ck$n"
    msrun_n $n --steps 6 --ckpt-dir "$work/ck$n" --loss-log "$work/re$n.log" >/dev/null \
        2>"$work/err" || fail "resume on $n ranks: $(cat "$work/err")"
    grep -q "train_gpt: resuming with the checkpoint's global batch of 8 sequences (step 3, saved by 2 ranks; this job has $n)" \
        "$work/err" || fail "resume on $n ranks: no global batch line: $(cat "$work/err")"
    [[ $(grep -c "checkpoint's global batch" "$work/err") -eq 1 ]] ||
        fail "resume on $n ranks: not rank 0 alone: $(cat "$work/err")"
    grep -q "resumed from step 3 under .* (saved by 2 ranks)" "$work/err" ||
        fail "resume on $n ranks: $(cat "$work/err")"
    close "$work/re$n.log" "$work/want" 3
done

# refused, exit 2, before a step: refuse N PATTERN ARGS... (job_env.sh)
cp -r "$work/ck" "$work/ckg"
refuse 4 "other settings; checkpoint: .*global batch 8; .*this run: .*global batch 16;" \
    --steps 6 --ckpt-dir "$work/ckg" --global-batch 16
# 8 sequences do not divide among 3 ranks of micro-batch 2
refuse 3 "--global-batch 8 is not a multiple of micro-batch 2 x dp 3" --steps 6 \
    --ckpt-dir "$work/ckg"
# rank 0's shard cut inside its header: the file named, nothing trained
cp -r "$work/ck" "$work/cut"
truncate -s 40 "$work/cut/step-3/rank-0.bin"
refuse 4 "the global batch of the checkpoint under .*step-3/rank-0.bin" --steps 6 \
    --ckpt-dir "$work/cut"
echo "ok: resumed on 4 and 1 ranks with the checkpoint's global batch, the refusals"
