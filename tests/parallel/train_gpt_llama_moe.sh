#!/usr/bin/env bash
# train_gpt --arch llama with Mixture-of-Experts blocks (Mixtral's SwiGLU
# experts and renormalised top-k gates, docs/model.md "Llama experts"):
# layouts that cannot work are refused before training (exit 2, with the
# reason); ep 2, dp 2 (ZeRO 1), tp 2 (sp), pp 2 and cp 2 train 10 steps
# within 1e-5 (relative) of one process training the same model on the
# same global batch, with the same routing (--report's per-step router
# counts are identical), with a capacity that drops choices every step;
# a checkpoint saved by ep 2 at step 3 resumes bitwise in that layout and
# within 1e-5 in one process; the report counts a rank's experts at 3FC
# floats each.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
job_prefix=llamamoe
# capacity 1.0 drops some choices every step; fewer kv heads than heads
moe=(--arch llama --layers 2 --channels 16 --heads 2 --kv-heads 1 --ffn 24 --seq 16
    --micro-batch 2 --experts 4 --top-k 2 --moe-every 1 --capacity-factor 1.0 --aux-loss 0.01
    --global-batch 8 --report)
refuse 2 "3 experts do not divide among ep 2 ranks" "${moe[@]}" --experts 3 --ep 2
refuse 4 "6 experts do not divide among ep 2 x tp 2 ranks" "${moe[@]}" --experts 6 --ep 2 \
    --tp 2
refuse 1 "top-k 5 is not in \[1, 4 experts\]" "${moe[@]}" --top-k 5
refuse 1 "moe-every 3 is not in \[1, 2 layers\]" "${moe[@]}" --moe-every 3
refuse 1 "ep 2 does not divide dp 1" "${moe[@]}" --ep 2
routing() {
    grep -o "moe step .*" "$1"
}
timeout 60 "$bin/train_gpt" "${moe[@]}" --steps 10 --loss-log "$work/one" >/dev/null \
    2>"$work/one.err" || fail "one process: $(cat "$work/one.err")"
[[ $(routing "$work/one.err" | wc -l) -eq 20 ]] || fail "no routing report: $(cat "$work/one.err")"
grep -q "moe step 1 block 0 (layer 0): 128 tokens, [1-9][0-9]* of 256 choices dropped" \
    "$work/one.err" || fail "nothing dropped: $(routing "$work/one.err")"
# layout NAME RANKS ARGS...: against the one-process run
layout() {
    local name=$1 n=$2
    shift 2
    msrun_n "$n" "${moe[@]}" --steps 10 --loss-log "$work/$name" "$@" >/dev/null \
        2>"$work/$name.err" || fail "$name: $(cat "$work/$name.err")"
    close "$work/$name" "$work/one" 10 "$name"
    diff <(routing "$work/one.err") <(routing "$work/$name.err") >/dev/null ||
        fail "$name routes otherwise: $(diff <(routing "$work/one.err") <(routing "$work/$name.err"))"
}
layout ep2 2 --ep 2
layout dp2-zero1 2 --zero 1 --zero-min-bytes 0 --bucket-mb 0.01
layout tp2-sp 2 --tp 2 --sp
layout pp2 2 --pp 2
layout cp2 2 --cp 2

# a checkpoint of ep 2 at step 3: resumed bitwise, and in one process
ck=("${moe[@]}" --ep 2 --steps 5)
msrun_n 2 "${ck[@]}" --loss-log "$work/whole" >/dev/null 2>"$work/err" ||
    fail "uninterrupted: $(cat "$work/err")"
msrun_n 2 "${ck[@]}" --steps 3 --ckpt-dir "$work/ck" --loss-log "$work/first" >/dev/null \
    2>"$work/err" || fail "first part: $(cat "$work/err")"
cp -r "$work/ck" "$work/ck1"
msrun_n 2 "${ck[@]}" --ckpt-dir "$work/ck" --resume --loss-log "$work/second" >/dev/null \
    2>"$work/err" || fail "resumed: $(cat "$work/err")"
grep -q "resumed from step 3" "$work/err" || fail "no resume: $(cat "$work/err")"
diff "$work/whole" <(cat "$work/first" "$work/second") ||
    fail "the resumed run differs from the uninterrupted one"
msrun_n 1 "${ck[@]}" --ep 1 --ckpt-dir "$work/ck1" --resume --loss-log "$work/second1" \
    >/dev/null 2>"$work/err" || fail "resumed alone: $(cat "$work/err")"
resumed "$work/whole" "$work/second1" 2
# 2 blocks x 2 experts x 3FC = 3 x 24 x 16 floats on each ep rank
msrun_n 2 "${moe[@]}" --steps 1 --ep 2 >/dev/null 2>"$work/err" || fail "$(cat "$work/err")"
grep -q "rank 1 experts: 2 of 4 per MoE block held here: params 18432 grads 18432 optim 36864" \
    "$work/err" || fail "no expert memory in the report: $(cat "$work/err")"
echo "train_gpt --arch llama with experts: ok"
