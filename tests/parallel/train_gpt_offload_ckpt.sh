#!/usr/bin/env bash
# train_gpt --offload optimizer=disk:DIR with checkpoints (docs/model.md
# "Offload"): a run stopped at step 5 and resumed ends with exactly the
# losses of a run never stopped, for ZeRO 0, 1, 2 and 3; the moments do travel
# through the checkpoint: an offloaded run's checkpoint resumed without
# offload, and a plain checkpoint resumed with it, give the same losses too.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
small=(--layers 2 --channels 32 --heads 4 --seq 16 --micro-batch 2 --global-batch 4
    --bucket-mb 0.02 --zero-min-bytes 0 --ckpt-every 5)
mkdir -p "$work/off"
off=(--offload "optimizer=disk:$work/off" --offload-chunk 8192)
# run LOG STEPS CKPT ARGS...: a 2-rank job to STEPS appending to $work/LOG
run() {
    local log=$1 steps=$2 ck=$3 job=offck-$$-$RANDOM
    shift 3
    jobs_started+=("$job")
    timeout -k 5 60 "${msrun_cmd[@]}" --worker_num=2 --local_worker_num=2 --job_id="$job" \
        "${worker_env[@]}" "$bin/train_gpt" "${small[@]}" --steps "$steps" --ckpt-dir "$work/$ck" \
        --loss-log "$work/$log" "$@" >"$work/out" 2>&1 ||
        fail "$log to step $steps: exited $?: $(tail -5 "$work/out")"
}
for zero in 0 1 2 3; do
    run "ref$zero" 10 "ck-ref$zero" --zero $zero
    [[ $(wc -l <"$work/ref$zero") -eq 10 ]] || fail "ref$zero: $(wc -l <"$work/ref$zero") steps"
    # stopped at 5 and resumed, with offload throughout
    run "off$zero" 5 "ck-off$zero" --zero $zero "${off[@]}"
    run "off$zero" 10 "ck-off$zero" --zero $zero "${off[@]}" --resume
    grep -q "resumed from step 5" "$work/out" || fail "zero $zero: no resume: $(cat "$work/out")"
    cmp -s "$work/ref$zero" "$work/off$zero" ||
        fail "zero $zero: the resumed offload run differs: $(diff "$work/ref$zero" "$work/off$zero" | head -4)"
    [[ -z "$(ls -A "$work/off")" ]] || fail "zero $zero: files left: $(ls "$work/off")"
done
# across (ZeRO 1 and 2): the offloaded run's checkpoint without offload, a
# plain one with it
for z in 1 2; do
    mkdir "$work/ck-a$z" && cp -r "$work/ck-off$z/step-5" "$work/ck-a$z/"
    head -5 "$work/ref$z" >"$work/a$z"
    run "a$z" 10 "ck-a$z" --zero $z --resume
    cmp -s "$work/ref$z" "$work/a$z" || fail "zero $z: an offloaded checkpoint resumed without offload differs"
    mkdir "$work/ck-b$z" && cp -r "$work/ck-ref$z/step-5" "$work/ck-b$z/"
    head -5 "$work/ref$z" >"$work/b$z"
    run "b$z" 10 "ck-b$z" --zero $z --resume "${off[@]}"
    cmp -s "$work/ref$z" "$work/b$z" || fail "zero $z: a plain checkpoint resumed with offload differs"
done
echo "offload: checkpoints and resume equal to runs never stopped (ZeRO 0-3, and across)"
