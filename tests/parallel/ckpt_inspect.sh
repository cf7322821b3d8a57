#!/usr/bin/env bash
# msrun ckpt inspect: a tp 2 x pp 2 checkpoint's step, world, tensors and
# bytes, every piece checked; a damaged piece, a truncated shard, a step
# that is not there and no checkpoint at all: exit 2 naming the file (and
# the tensor).
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
job=inspect-$$
jobs_started+=("$job")
timeout -k 5 60 "${msrun_cmd[@]}" --worker_num=4 --local_worker_num=4 --job_id="$job" \
    "${worker_env[@]}" "$bin/train_gpt" --layers 2 --channels 32 --heads 4 --seq 16 \
    --micro-batch 2 --grad-accum 2 --tp 2 --pp 2 --steps 2 --ckpt-dir "$work/ck" \
    >/dev/null 2>"$work/err" || fail "train_gpt: $(cat "$work/err")"
inspect() { # inspect WANT_RC ARGS...: msrun ckpt inspect ARGS, its status WANT_RC
    local want=$1 rc=0
    shift
    timeout 30 "$bin/msrun" ckpt inspect "$@" >"$work/out" 2>"$work/err" || rc=$?
    [[ $rc -eq $want ]] || fail "inspect $* exited $rc, want $want: $(cat "$work/out" "$work/err")"
}
inspect 0 "$work/ck"
for want in "step 2 (optimizer step 2, 8 samples drawn), saved by 4 ranks" \
    "layout: dp 1 x pp 2 x cp 1 x tp 2, 1 virtual stages per rank, ep 1" \
    "  h1.qkvw        (96, 32)              36864 bytes" "  lnfb           (32)" \
    "4 shards, .* pieces: every checksum matches, every element present"; do
    grep -q -- "$want" "$work/out" || fail "no '$want' in: $(cat "$work/out")"
done
[[ $(grep -c " bytes$" "$work/out") -eq 28 ]] || fail "not 28 tensors: $(cat "$work/out")"
inspect 0 "$work/ck" --step 2
inspect 2 "$work/ck" --step 3
grep -q "step-3/rank-0.bin does not exist" "$work/err" || fail "$(cat "$work/err")"
inspect 2 "$work/none"
grep -q "no complete checkpoint" "$work/err" || fail "$(cat "$work/err")"
cp -r "$work/ck" "$work/piece"
end=$(pieces_end "$work/piece/step-2/rank-3.bin") # its last piece's end
printf '\x55' | dd of="$work/piece/step-2/rank-3.bin" bs=1 seek=$((end - 100)) conv=notrunc \
    2>/dev/null
inspect 2 "$work/piece"
grep -q "step-2/rank-3.bin: the piece of tensor .* does not match its CRC" "$work/err" ||
    fail "$(cat "$work/err")"
cp -r "$work/ck" "$work/cut"
truncate -s -8 "$work/cut/step-2/rank-1.bin"
inspect 2 "$work/cut"
grep -q "step-2/rank-1.bin is not rank 1's state of step 2" "$work/err" || fail "$(cat "$work/err")"
echo "msrun ckpt inspect: ok"
