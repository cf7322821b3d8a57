#!/usr/bin/env bash
# msrun ckpt export DIR [--step N] --safetensors FILE (docs/checkpoint.md
# "msrun ckpt export"): the weights of a tp 2 x pp 2 checkpoint and of a
# dp 2 ZeRO-3 one equal, byte for byte, what the training run exported at
# that step and what a one-process resume exports, and so do a MoE model's
# (tp 2, ep 2; and dp 2 ZeRO-3, its experts sharded over replicas); --step picks an older step; train_gpt --init-from the export
# computes the resume's loss (1e-5); MSRUN_ and MSR_ variables are ignored.
# No checkpoint, a step that is not there, a damaged piece, a FILE that
# cannot be written: exit 2 naming the file, FILE left as it was, no
# private folder left behind.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
W=$work
# the model, the options every msrun_n starts with (job_env.sh)
job_prefix=export train_args=(--layers 2 --channels 32 --heads 4 --seq 16 --micro-batch 2)
# train N ARGS...: msrun_n N ARGS succeeds (its stderr in $W/err)
train() { msrun_n "$@" >/dev/null 2>"$W/err" || fail "train_gpt $*: $(cat "$W/err")"; }
# export WANT_RC ARGS...: msrun ckpt export ARGS, its status WANT_RC
export_() {
    local want=$1 rc=0
    shift
    timeout -k 5 60 "$bin/msrun" ckpt export "$@" >"$W/out" 2>"$W/err" || rc=$?
    [[ $rc -eq $want ]] || fail "export $* exited $rc, want $want: $(cat "$W/out" "$W/err")"
    ! ls -d "$W"/*.export-* 2>/dev/null || fail "export $*: a private folder was left behind"
}
same() { cmp -s "$1" "$2" || fail "$1 and $2 differ ($3)"; }

# tp 2 x pp 2, on data of one repeated byte (every batch the same, so a
# loss depends on the weights only); checkpoints at steps 2 and 3
head -c 8192 /dev/zero | tr '\0' a >"$W/data"
train 4 --data "$W/data" --grad-accum 2 --tp 2 --pp 2 --steps 3 --ckpt-every 2 \
    --ckpt-dir "$W/ck" --export-safetensors "$W/train3.st"
touch "$W/mark"
export_ 0 "$W/ck" --safetensors "$W/e3.st"
[[ -z $(find "$W/ck" -newer "$W/mark") ]] || fail "export wrote into the checkpoint's folder"
grep -q "exported the weights of step 3 of $W/ck to $W/e3.st" "$W/out" || fail "$(cat "$W/out")"
same "$W/train3.st" "$W/e3.st" "tp 2 x pp 2: the run's own export and msrun ckpt export"
cp -r "$W/ck" "$W/ck1"
train 1 --data "$W/data" --global-batch 4 --steps 0 --resume --ckpt-dir "$W/ck1" \
    --export-safetensors "$W/r3.st"
same "$W/r3.st" "$W/e3.st" "tp 2 x pp 2: a one-process resume's export and msrun ckpt export"
# msrun's options and a job's variables in the environment do not reach the
# one-process run (MSRUN_NNODES=2 would wait for a second node)
MSRUN_NNODES=2 MSRUN_WORKER_NUM=4 MSR_RANK=3 export_ 0 "$W/ck" --safetensors "$W/env.st"
same "$W/e3.st" "$W/env.st" "with MSRUN_ and MSR_ variables set"
# --step: the newest (3) by number; 2, with the options in either order
export_ 0 "$W/ck" --step 3 --safetensors "$W/e3b.st"
same "$W/e3.st" "$W/e3b.st" "--step 3"
export_ 0 "$W/ck" --safetensors "$W/e2.st" --step 2
rm -rf "$W/ck2" && cp -r "$W/ck" "$W/ck2" && rm -rf "$W/ck2/step-3"
train 1 --data "$W/data" --global-batch 4 --steps 0 --resume --ckpt-dir "$W/ck2" \
    --export-safetensors "$W/r2.st"
same "$W/r2.st" "$W/e2.st" "--step 2"
cmp -s "$W/e2.st" "$W/e3.st" && fail "the exports of steps 2 and 3 are equal"
# the export's weights compute the loss the resume computes at step 4
train 1 --data "$W/data" --global-batch 4 --steps 4 --resume --ckpt-dir "$W/ck1" \
    --loss-log "$W/l_resume"
train 1 --data "$W/data" --global-batch 4 --steps 1 --init-from "$W/e3.st" \
    --loss-log "$W/l_init"
timeout 30 /usr/bin/env python3 - "$W/l_resume" "$W/l_init" <<'PY' || fail "the losses differ"
import sys
a, b = ([float.fromhex(l.split()[3]) for l in open(p)] for p in sys.argv[1:3])
print("losses:", a, b)
sys.exit(0 if len(a) == 1 and len(b) == 1 and abs(a[0] - b[0]) <= 1e-5 * abs(a[0]) else 1)
PY

# dp 2 ZeRO-3 on the generated corpus
train 2 --corpus-bytes 8192 --global-batch 4 --zero 3 --steps 2 --ckpt-dir "$W/z" \
    --export-safetensors "$W/ztrain.st"
export_ 0 "$W/z" --safetensors "$W/ze.st"
same "$W/ztrain.st" "$W/ze.st" "ZeRO-3: the run's own export and msrun ckpt export"
cp -r "$W/z" "$W/z1"
train 1 --corpus-bytes 8192 --global-batch 4 --steps 0 --resume --ckpt-dir "$W/z1" \
    --export-safetensors "$W/zr.st"
same "$W/zr.st" "$W/ze.st" "ZeRO-3: a one-process resume's export and msrun ckpt export"

# ZeRO-3 with a MoE model: the flat parameters a segment at a time, the
# experts' shards (replicated over dp 2) a block at a time, two blocks
train 2 --corpus-bytes 8192 --global-batch 4 --experts 4 --top-k 2 --moe-every 1 --zero 3 \
    --steps 2 --ckpt-dir "$W/mz" --export-safetensors "$W/mztrain.st"
export_ 0 "$W/mz" --safetensors "$W/mze.st"
same "$W/mztrain.st" "$W/mze.st" "MoE ZeRO-3: the run's own export and msrun ckpt export"

# a Mixture-of-Experts model saved by tp 2 x dp 2 with ep 2
train 4 --corpus-bytes 8192 --global-batch 4 --experts 4 --top-k 2 --moe-every 2 --tp 2 \
    --ep 2 --steps 2 --ckpt-dir "$W/m" --export-safetensors "$W/mtrain.st"
export_ 0 "$W/m" --safetensors "$W/me.st"
same "$W/mtrain.st" "$W/me.st" "MoE: the run's own export and msrun ckpt export"
grep -q '"h1.e3.fcprojw":{"dtype":"F32","shape":\[32,128\]' "$W/me.st" || fail "MoE: no h1.e3.fcprojw"

# bad input: exit 2 naming the file; an existing FILE is left as it was
echo old >"$W/keep.st"
export_ 2 "$W/none" --safetensors "$W/keep.st"
grep -q "no complete checkpoint .* under $W/none" "$W/err" || fail "$(cat "$W/err")"
export_ 2 "$W/ck" --step 4 --safetensors "$W/keep.st"
grep -q "step-4/rank-0.bin does not exist" "$W/err" || fail "$(cat "$W/err")"
cp -r "$W/ck" "$W/bad"
end=$(pieces_end "$W/bad/step-3/rank-3.bin") # its last piece's end
printf '\x55' | dd of="$W/bad/step-3/rank-3.bin" bs=1 seek=$((end - 100)) conv=notrunc 2>/dev/null
export_ 2 "$W/bad" --safetensors "$W/keep.st"
grep -q "$W/bad/step-3/rank-3.bin: the piece of tensor .* does not match its CRC" "$W/err" ||
    fail "$(cat "$W/err")"
[[ $(cat "$W/keep.st") == old ]] || fail "a failed export changed FILE"
export_ 2 "$W/ck" --safetensors "$W/no/such/dir/x.st"
grep -q "cannot write $W/no/such/dir/x.st" "$W/err" || fail "$(cat "$W/err")"
export_ 2 "$W/ck" --safetensors "$W"
grep -q "cannot write $W: it is a directory" "$W/err" || fail "$(cat "$W/err")"
# the data the settings name is gone: train_gpt's message, exit 2
mv "$W/data" "$W/data.gone"
export_ 2 "$W/ck" --safetensors "$W/keep.st"
grep -q "$W/data" "$W/err" && grep -q "exporting step 3 of $W/ck to $W/keep.st failed" "$W/err" ||
    fail "$(cat "$W/err")"
[[ $(cat "$W/keep.st") == old ]] || fail "a failed export changed FILE"
for args in "$W/ck" "$W/ck --step 2" "$W/ck --safetensors" "$W/ck --step x --safetensors $W/k" \
    "$W/ck --safetensors $W/k --safetensors $W/k" "$W/ck --step -1 --safetensors $W/k"; do
    # shellcheck disable=SC2086
    export_ 2 $args
    grep -q "usage: msrun ckpt" "$W/err" || fail "$args: no usage: $(cat "$W/err")"
done
echo "msrun ckpt export: ok"
