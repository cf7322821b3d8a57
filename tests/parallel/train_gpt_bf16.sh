#!/usr/bin/env bash
# train_gpt --precision bf16 in every layout: each run's losses against one
# process in bf16 on the same global batch, within the tolerance derived
# below; one process in bf16 differs from fp32 (the switch does something)
# but stays close; a bf16 run resumes from its checkpoint bitwise; the
# options' bad values and refused combinations exit 2 with the reason.
#
# The tolerance, derived (docs/model.md "bf16 training"). Two layouts
# compute the same fp32 values up to the order of their sums (tp splits a
# product's sum, dp and ZeRO sum the gradients in another order, cp folds
# the softmax block by block), so an operand of a product differs between
# them by a few fp32 ulps (2^-23 relative each). Rounded to bf16 (RNE, 8
# significant bits, unit roundoff u = 2^-8) both land on the same bf16
# number unless they straddle a rounding midpoint, and then on adjacent
# ones, each within u of the fp32 value: at most 2u = 2^-7 apart. A flip
# therefore moves an operand at most twice as far as bf16's own rounding
# moves it from fp32 (u), and happens to about 2^-16 of the elements (the
# 16 bits bf16 drops). To first order the loss moves by the sum of its
# sensitivities times the operands' moves, so flips move it at most twice
# as far as rounding every operand once does; taking that, bf16's own cost,
# to be at most u of the loss (each product's relative error; the one
# assumption, checked below by holding bf16 against fp32 to the same
# bound), the tolerance per step is |loss - loss of one process| <= 2u x
# loss = loss / 128. bf16 against fp32 must also differ (the switch does
# something). The measured differences are in docs/model.md.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
small=(--layers 4 --channels 32 --heads 4 --seq 16 --micro-batch 2 --global-batch 4 --steps 3
    --precision bf16)
job_prefix=bf16
refuse 1 "--precision fp16: not fp32 or bf16" --precision fp16
refuse 1 "--grad-reduce-dtype f32: not fp32 or bf16" --grad-reduce-dtype f32
refuse 1 "gradients reduced in bf16 need ZeRO stage 0, not 1" --grad-reduce-dtype bf16 --zero 1
refuse 1 "--device cuda sums gradients in fp32" --grad-reduce-dtype bf16 --device cuda
timeout 30 "$bin/train_gpt" --help >"$work/help" || fail "--help exited $?"
grep -q -- "--precision" "$work/help" || fail "--help has no --precision"

# losses FILE: "step loss" pairs
losses() { grep -o 'step [0-9]* loss [0-9.]*' "$1" | awk '{ print $2, $4 }'; }
# close NAME A B: the same steps, |loss difference| <= 2u x loss = loss /
# 128 (above); prints the largest difference
close() {
    paste <(losses "$2") <(losses "$3") |
        awk -v name="$1" '{ d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > $2 / 128) bad = 1
                            if (d > m) m = d; n++ }
             END { printf "%s: max |loss difference| %.6f over %d steps\n", name, m, n
                   exit bad || n != 3 }' ||
        fail "$1 is not within loss / 128 of one process: $(paste "$2" "$3")"
}

timeout 60 "$bin/train_gpt" "${small[@]}" >"$work/one" 2>"$work/one.err" ||
    fail "one process: $(cat "$work/one.err")"
# a CPU without bf16 units says so once (never an illegal instruction)
if ! grep -q avx512_bf16 /proc/cpuinfo; then
    [[ $(grep -c "no bf16 units" "$work/one.err") -eq 1 ]] ||
        fail "no single slower-path line: $(cat "$work/one.err")"
fi
timeout 60 "$bin/train_gpt" "${small[@]}" --precision fp32 >"$work/f32" ||
    fail "one process fp32"
close "bf16 vs fp32" "$work/one" "$work/f32"
cmp -s <(losses "$work/one") <(losses "$work/f32") &&
    fail "bf16 prints the losses of fp32: the switch does nothing"

# --report's bf16 operand scratch, counted by hand: the largest operands
# of any product are the head's, dlogits (N,V) and wte (V,C), N = 2 x 16
# rows, V = 256, C = 32: 2 x (32 x 256 + 256 x 32) = 32768 bytes, and the
# weights' bf16 copy of the 59,584 parameters (VC + TC + 4 (12C^2 + 13C) +
# 2C), 119,168 bytes, and attention's two held operands (qkv, N x 3C, and
# its output's gradient, N x C): 2 x (32 x 96 + 32 x 32) = 8192 bytes:
# 160,128. Under tp 2 each rank holds V/2 of the vocabulary: 2 x (32 x
# 128 + 128 x 32) = 16384, its 30,464 parameters (VC/2 + TC + 4 (6C^2 +
# 19C/2) + 2C: a block's weights and qkv and fc biases halved, its
# layernorms and output biases whole), 60,928 bytes, and its heads' held
# operands on all N rows (gathered under sp): 2 x (32 x 48 + 32 x 16) =
# 4096: 81,408
timeout 60 "$bin/train_gpt" "${small[@]}" --steps 1 --report >/dev/null 2>"$work/rep" ||
    fail "--report: $(cat "$work/rep")"
grep -q "rank 0 precision bf16: bf16 operand scratch 160128 bytes; gradients summed in fp32" \
    "$work/rep" || fail "--report: $(cat "$work/rep")"

# nearer NAME B F L: layout L stays away from one fp32 process F: its
# largest loss difference from F is at least a quarter of one bf16
# process B's from F. This catches a layout that ran its products
# unrounded: it lands within fp32's own layout noise of F (under 1e-5
# here). A layout that rounds them lands near B give or take its own
# rounding flips, which on this 3-step model reach past half of B's
# distance from F (cp 2: 8e-5 of 1.4e-4), so asking L to be nearer B than
# F decided on where those flips fell, not on the rounding.
maxdiff() { paste <(losses "$1") <(losses "$2") |
    awk '{ d = $2 - $4; if (d < 0) d = -d; if (d > m) m = d } END { printf "%.9g", m }'; }
nearer() {
    local to_f bf
    to_f=$(maxdiff "$3" "$4")
    bf=$(maxdiff "$2" "$3")
    awk -v t="$to_f" -v b="$bf" 'BEGIN { exit !(4 * t >= b) }' ||
        fail "$1 is $to_f from fp32, under a quarter of bf16's $bf: a product not rounded?"
}
run() { # run NAME N ARGS...
    local name=$1 n=$2
    shift 2
    msrun_n "$n" "${small[@]}" "$@" >"$work/$name" 2>"$work/$name.err" ||
        fail "$name: $(cat "$work/$name.err")"
    close "$name" "$work/one" "$work/$name"
    nearer "$name" "$work/one" "$work/f32" "$work/$name"
}
run dp2 2 --dp 2
run zero1 2 --dp 2 --zero 1
run zero2 2 --dp 2 --zero 2 --bucket-mb 0.02
run zero3 2 --dp 2 --zero 3
run tp2-sp 2 --tp 2 --sp --recompute selective --report
for r in 0 1; do
    grep -q "rank $r precision bf16: bf16 operand scratch 81408 bytes" "$work/tp2-sp.err" ||
        fail "tp 2 --report, rank $r: $(cat "$work/tp2-sp.err")"
done
run pp2-gpipe 2 --pp 2 --schedule gpipe
run pp2-1f1b 2 --pp 2 --schedule 1f1b --recompute full
run pp2-interleaved 2 --pp 2 --schedule interleaved --virtual-stages 2
run cp2 2 --cp 2

# gradients summed in bf16 (rounded to bf16 once per rank, fp32 sums,
# rounded once more): each rank's gradient moves by at most u relative
# before the sum and the sum by u after it, the same order as a product's
# operand (above), so the same bound; and it must differ from the fp32 sum
run dp2-grad-bf16 2 --dp 2 --grad-reduce-dtype bf16
cmp -s <(losses "$work/dp2") <(losses "$work/dp2-grad-bf16") &&
    fail "--grad-reduce-dtype bf16 prints the losses of fp32 sums"
# and through the model-parallel runtime's buckets (dp x cp over pp)
run dp2-pp2-grad-bf16 4 --dp 2 --pp 2 --schedule gpipe --grad-reduce-dtype bf16

# Mixture-of-Experts, expert parallel over 2 ranks, against its own one
# process
moe=(--experts 4 --top-k 2)
timeout 60 "$bin/train_gpt" "${small[@]}" "${moe[@]}" >"$work/one" 2>"$work/one.err" ||
    fail "one process, MoE: $(cat "$work/one.err")"
timeout 60 "$bin/train_gpt" "${small[@]}" "${moe[@]}" --precision fp32 >"$work/f32" ||
    fail "one process, MoE, fp32"
run ep2 2 "${moe[@]}" --dp 2 --ep 2

# resume: dp 2 with ZeRO-1 saves at step 2 and resumes for step 3; the
# losses (exact, %a) are bitwise those of the run that never stopped, the
# fp32 masters and moments being what the checkpoint holds
ck=(--dp 2 --zero 1)
msrun_n 2 "${small[@]}" "${ck[@]}" --loss-log "$work/whole" >/dev/null 2>"$work/err" ||
    fail "uninterrupted: $(cat "$work/err")"
msrun_n 2 "${small[@]}" "${ck[@]}" --steps 2 --ckpt-dir "$work/ck" --loss-log "$work/first" \
    >/dev/null 2>"$work/err" || fail "first part: $(cat "$work/err")"
msrun_n 2 "${small[@]}" "${ck[@]}" --ckpt-dir "$work/ck" --resume --loss-log "$work/second" \
    >/dev/null 2>"$work/err" || fail "resumed: $(cat "$work/err")"
grep -q "resumed from step 2" "$work/err" || fail "no resume: $(cat "$work/err")"
[[ $(wc -l <"$work/whole") -eq 3 ]] || fail "loss log: $(cat "$work/whole")"
diff "$work/whole" <(cat "$work/first" "$work/second") ||
    fail "the resumed bf16 run differs from the uninterrupted one"
echo "train_gpt bf16: ok"
