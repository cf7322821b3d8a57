#!/usr/bin/env bash
# train_gpt --device cuda where CUDA sees no device (CUDA_VISIBLE_DEVICES
# empty, so a machine with a GPU fails the same way as one without): the
# CUDA trainer and model leave the reason in the error text and log nothing
# (base/err.h); train_gpt prints it once, on the line that says what could
# not start. A process alone and each rank of a 2-rank job.
#   device_err.sh    (only in builds with the CUDA training path)
set -u
build=${MSRUN_BUILD:?MSRUN_BUILD is not set}
tg=$build/bin/train_gpt
source "$(dirname "$0")/../job_env.sh"
job_test_setup
small=(--layers 1 --channels 16 --heads 2 --seq 8 --micro-batch 2 --corpus-bytes 4096)
reason="no CUDA device here\|CUDA is unusable here"

# alone: the reason is on train_gpt's own line, and on no other
rc=0
CUDA_VISIBLE_DEVICES= timeout -k 5 60 "$tg" "${small[@]}" --steps 2 --device cuda \
    >"$work/alone" 2>&1 || rc=$?
cat "$work/alone"
[[ $rc -eq 1 ]] || fail "--device cuda without a visible device exited $rc, not 1"
grep -q "cannot start on the GPU: .*\($reason\)" "$work/alone" ||
    fail "train_gpt's line does not name CUDA's reason"
n=$(grep -c "$reason" "$work/alone")
[[ $n -eq 1 ]] || fail "CUDA's reason printed $n times, not once"

# a job: each rank says once that the device communicator could not be made,
# and why (the communicator's words: msr_comm_device)
job=deverr-$$-$RANDOM
jobs_started+=("$job")
rc=0
CUDA_VISIBLE_DEVICES= timeout -k 5 90 "${msrun_cmd[@]}" --worker_num=2 --local_worker_num=2 \
    --job_id="$job" "${worker_env[@]}" "$tg" "${small[@]}" --steps 2 --device cuda \
    >"$work/job" 2>&1 || rc=$?
cat "$work/job"
[[ $rc -eq 1 ]] || fail "a 2-rank --device cuda job without a visible device exited $rc, not 1"
for r in 0 1; do
    n=$(grep -c "^\[node 0 rank $r\].*msr_comm_device" "$work/job")
    [[ $n -eq 1 ]] || fail "rank $r gave the communicator's reason $n times, not once"
    grep -q "^\[node 0 rank $r\] train_gpt: --device cuda: cannot start on the GPU: .*making the device communicator" \
        "$work/job" || fail "rank $r's line does not say what could not start"
done
echo "device_err: ok"
