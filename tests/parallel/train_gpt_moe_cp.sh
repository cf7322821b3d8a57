#!/usr/bin/env bash
# train_gpt with Mixture-of-Experts blocks under context parallel: the
# router decides token by token and the capacity is counted over the whole
# micro-batch in one process's token order, so cp 2, cp 4, cp 2 x ep 2,
# cp 2 x dp 2, cp 2 x tp 2 (sp), cp 2 x pp 2 and cp 2 with full recompute
# train 10 steps within 1e-5 (relative) of one process on the same global
# batch, with the same routing (--report's per-step router counts, dropped
# choices and per-expert loads, are identical), with a capacity that drops
# choices every step and with one that drops none; the load-balancing
# loss is in the compared loss. A cp group that cannot split the sequence
# is refused before training. A checkpoint saved under cp 2 x ep 2 x dp 2
# (ZeRO 1) at step 3 resumes to the uninterrupted run's loss log, byte for
# byte.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
job_prefix=moecp
# capacity 1.0 drops some choices every step
moe=(--layers 2 --channels 16 --heads 2 --seq 16 --micro-batch 2 --experts 4 --top-k 2
    --moe-every 1 --capacity-factor 1.0 --aux-loss 0.01 --global-batch 8 --report)
refuse 4 "does not divide into 2 x cp = 8 chunks" "${moe[@]}" --seq 12 --cp 4
routing() {
    grep -o "moe step .*" "$1"
}
# one NAME ARGS...: the one-process reference run
one() {
    local name=$1
    shift
    timeout 60 "$bin/train_gpt" "${moe[@]}" "$@" --steps 10 --loss-log "$work/$name" \
        >/dev/null 2>"$work/$name.err" || fail "one process $name: $(cat "$work/$name.err")"
    [[ $(routing "$work/$name.err" | wc -l) -eq 20 ]] ||
        fail "no routing report: $(cat "$work/$name.err")"
}
# layout NAME RANKS ARGS...: against the one-process run $ref
layout() {
    local name=$1 n=$2
    shift 2
    msrun_n "$n" "${moe[@]}" --steps 10 --loss-log "$work/$name" "$@" >/dev/null \
        2>"$work/$name.err" || fail "$name: $(cat "$work/$name.err")"
    close "$work/$name" "$work/$ref" 10 "$name"
    diff <(routing "$work/$ref.err") <(routing "$work/$name.err") >/dev/null ||
        fail "$name routes otherwise: $(diff <(routing "$work/$ref.err") <(routing "$work/$name.err"))"
}

one drop
grep -q "moe step 1 block 0 (layer 0): 128 tokens, [1-9][0-9]* of 256 choices dropped" \
    "$work/drop.err" || fail "nothing dropped: $(routing "$work/drop.err")"
ref=drop
layout cp2 2 --cp 2
layout cp4 4 --cp 4
layout cp2-ep2 4 --cp 2 --ep 2
layout cp2-dp2-zero1 4 --cp 2 --zero 1 --zero-min-bytes 0 --bucket-mb 0.01
layout cp2-tp2-sp 4 --cp 2 --tp 2 --sp
layout cp2-pp2 4 --cp 2 --pp 2
layout cp2-full 2 --cp 2 --recompute full

# a capacity that drops nothing: cap = 2 x the tokens' share
one keep --capacity-factor 4
routing "$work/keep.err" | grep -v -q " 0 of 256 choices dropped" &&
    fail "capacity 4 dropped: $(routing "$work/keep.err")"
ref=keep
layout cp2-keep 2 --cp 2 --capacity-factor 4
layout cp2-ep2-keep 4 --cp 2 --ep 2 --capacity-factor 4
layout cp2-dp2-keep 4 --cp 2 --capacity-factor 4

# a checkpoint under cp 2 (ep 2 x dp 2 ZeRO 1 on 4 ranks: the experts and
# their sharded moments saved by both cp ranks) stopped at step 3 and
# resumed: the loss log byte-equal to the run that never stopped
ck=("${moe[@]}" --cp 2 --ep 2 --zero 1 --zero-min-bytes 0 --bucket-mb 0.01 --steps 5)
msrun_n 4 "${ck[@]}" --loss-log "$work/whole" >/dev/null 2>"$work/err" ||
    fail "uninterrupted: $(cat "$work/err")"
msrun_n 4 "${ck[@]}" --steps 3 --ckpt-dir "$work/ck" --loss-log "$work/first" >/dev/null \
    2>"$work/err" || fail "first part: $(cat "$work/err")"
msrun_n 4 "${ck[@]}" --ckpt-dir "$work/ck" --resume --loss-log "$work/second" >/dev/null \
    2>"$work/err" || fail "resumed: $(cat "$work/err")"
grep -q "resumed from step 3" "$work/err" || fail "no resume: $(cat "$work/err")"
[[ $(wc -l <"$work/whole") -eq 5 ]] || fail "uninterrupted: $(cat "$work/whole")"
cmp "$work/whole" <(cat "$work/first" "$work/second") ||
    fail "the resumed cp run differs from the uninterrupted one"
echo "train_gpt MoE under context parallel: ok"
