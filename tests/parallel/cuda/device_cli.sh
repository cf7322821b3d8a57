#!/usr/bin/env bash
# train_gpt's --device option where no GPU need exist: bad values and
# combinations are refused with a message and exit status 2 before anything
# starts; --device cuda in a build without the CUDA training path is refused
# the same way; in a build with it, on a machine without a usable GPU, a
# process alone and a 2-rank job under msrun end with status 1 and CUDA's
# reason (never a crash or a hang). --device cpu trains as before.
#   device_cli.sh ON|OFF    (whether this build has the CUDA training path)
set -u
cuda=$1
build=${MSRUN_BUILD:?MSRUN_BUILD is not set}
tg=$build/bin/train_gpt
job=devcli-$$-$RANDOM
work=$(mktemp -d)
source "$(dirname "$0")/../job_env.sh"
cleanup() {
    kill_job "$job"
    rm -rf "$work"
}
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { cleanup; }' EXIT
fail() {
    echo "FAIL: $*"
    cat "$work/out" 2>/dev/null
    exit 1
}
small=(--layers 1 --channels 16 --heads 2 --seq 8 --micro-batch 2 --corpus-bytes 4096)

# expect STATUS PATTERN ARGS...: train_gpt alone exits STATUS, output matches
expect() {
    local want=$1 pattern=$2 rc=0
    shift 2
    timeout -k 5 60 "$tg" "$@" >"$work/out" 2>&1 || rc=$?
    [[ $rc -eq $want ]] || fail "train_gpt $* exited $rc, not $want"
    grep -q -- "$pattern" "$work/out" || fail "train_gpt $*: no '$pattern' in its output"
}

help=$("$tg" --help) || fail "--help exit status"
grep -q -- "--device" <<<"$help" || fail "--help does not list --device"
expect 2 "--device gpu: not cpu or cuda" --device gpu
expect 2 "needs a value" --device
expect 0 "^step 2 loss" "${small[@]}" --steps 2 --device cpu
if [[ $cuda == OFF ]]; then
    expect 2 "no CUDA training path" "${small[@]}" --device cuda
    echo "device_cli (no CUDA training path in this build): ok"
    exit 0
fi
expect 2 "for --device cpu only" "${small[@]}" --device cuda --zero 1
expect 2 "for --device cpu only" "${small[@]}" --device cuda --report
expect 2 "for --device cpu only" "${small[@]}" --device cuda --recompute full
expect 2 "for --device cpu only" "${small[@]}" --device cuda --sp
# bf16 products run on GPU ranks; the gradients' sums stay fp32 there
expect 2 "--grad-reduce-dtype bf16 is for --device cpu only" "${small[@]}" --device cuda \
    --precision bf16 --grad-reduce-dtype bf16
# the optimizer's offload on GPU ranks: to the host (its chunk size with it),
# not to disk
expect 2 "optimizer=disk covers the CPU trainer's buffers only: not --device cuda" \
    "${small[@]}" --device cuda --offload "optimizer=disk:$work"
expect 2 "offload-chunk needs --offload optimizer=disk:DIR (or optimizer=host with --device cuda)" \
    "${small[@]}" --device cuda --offload-chunk 8192
expect 2 "not a multiple of 4096" "${small[@]}" --device cuda --offload optimizer=host \
    --offload-chunk 6000
# the blocks in host memory on GPU ranks: where AdamW runs, so with it
expect 2 "params=host keeps a GPU rank's blocks where AdamW updates them: it needs optimizer=host" \
    "${small[@]}" --device cuda --offload params=host
expect 2 "params=disk covers data, tensor, context, pipeline and expert parallel on CPU ranks" \
    "${small[@]}" --device cuda --offload "optimizer=host,params=disk:$work"
# the trainer is a module loaded for --device cuda: a missing one is a
# failure at run time (exit 1) with dlerror's reason, never a crash
rc=0
MSRUN_CUDA_TRAINER="$work/missing.so" timeout -k 5 60 "$tg" "${small[@]}" --steps 2 \
    --device cuda >"$work/out" 2>&1 || rc=$?
[[ $rc -eq 1 ]] || fail "--device cuda with a missing trainer module exited $rc, not 1"
grep -q "cannot load the CUDA trainer: .*missing.so" "$work/out" ||
    fail "a missing trainer module gave no reason"
rc=0
timeout -k 5 60 "$tg" "${small[@]}" --steps 2 --device cuda >"$work/out" 2>&1 || rc=$?
if [[ $rc -eq 0 ]]; then
    grep -q "^step 2 loss" "$work/out" || fail "--device cuda exited 0 without training"
    echo "device_cli: a GPU is here; the refusal without one is not exercised"
    exit 0
fi
[[ $rc -eq 1 ]] || fail "--device cuda without a GPU exited $rc, not 1"
grep -q "no CUDA device here\|CUDA is unusable here" "$work/out" || fail "no reason given"
# the host optimizer's options pass; what stops it is the same missing GPU
rc=0
timeout -k 5 60 "$tg" "${small[@]}" --steps 2 --device cuda --offload optimizer=host \
    --offload-chunk 8192 >"$work/out" 2>&1 || rc=$?
[[ $rc -eq 1 ]] || fail "--device cuda --offload optimizer=host without a GPU exited $rc, not 1"
grep -q "no CUDA device here\|CUDA is unusable here" "$work/out" ||
    fail "--offload optimizer=host: no reason given"
# a job: every rank fails alike when the device communicator cannot be made
rc=0
timeout -k 5 90 "${msrun_cmd[@]}" --worker_num=2 --local_worker_num=2 --job_id="$job" \
    "${worker_env[@]}" "$tg" "${small[@]}" --steps 2 --device cuda >"$work/out" 2>&1 || rc=$?
[[ $rc -eq 1 ]] || fail "a 2-rank --device cuda job without a GPU exited $rc, not 1"
grep -q "cannot start on the GPU" "$work/out" || fail "the job gave no reason"
echo "device_cli: ok"
