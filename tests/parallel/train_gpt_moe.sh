#!/usr/bin/env bash
# train_gpt with Mixture-of-Experts blocks and expert parallel: layouts
# that cannot work are refused before training (exit 2, with the reason);
# ep 2 and ep 4, ep with ZeRO 1, 2 and 3, and the model-parallel layouts
# (pp with 1F1B, GPipe on an uneven split and interleaved virtual stages,
# tp, tp with sp, recompute full and selective, ep x tp, and dp (ep 2) x
# pp 2 x tp 2 on 8 ranks) train 10 steps within 1e-5 (relative) of one
# process training the same MoE model on the same global batch, with the
# same routing (--report's per-step router counts are identical); the
# trace shows the dispatch and combine; a checkpoint saved in an ep layout
# resumes bitwise in that layout and within 1e-5 in another, and so do
# ones saved by pp 2 x ep 2 and by tp 2 (sp) x ep 2.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
job_prefix=moe
# every second block is MoE; capacity 1.0 drops some choices every step
moe=(--layers 2 --channels 16 --heads 2 --seq 16 --micro-batch 2 --experts 4 --top-k 2
    --moe-every 1 --capacity-factor 1.0 --aux-loss 0.01 --global-batch 8 --report)
refuse 1 "ep 2 does not divide dp 1" "${moe[@]}" --ep 2
refuse 2 "3 experts do not divide among ep 2 ranks" "${moe[@]}" --experts 3 --ep 2
refuse 2 "expert parallel needs at least 1 and a MoE model" "${moe[@]}" --experts 0 --ep 2
refuse 4 "ep 4 does not divide dp 2" "${moe[@]}" --ep 4 --tp 2
refuse 2 "3 experts do not divide among ep 1 x tp 2 ranks" "${moe[@]}" --experts 3 --tp 2
refuse 4 "6 experts do not divide among ep 2 x tp 2 ranks" "${moe[@]}" --experts 6 --ep 2 \
    --tp 2
refuse 1 "top-k 5 is not in \[1, 4 experts\]" "${moe[@]}" --top-k 5
refuse 1 "moe-every 3 is not in \[1, 2 layers\]" "${moe[@]}" --moe-every 3
# the routing of each step, as --report prints it (rank prefix stripped)
routing() {
    grep -o "moe step .*" "$1"
}

timeout 60 "$bin/train_gpt" "${moe[@]}" --steps 10 --loss-log "$work/one" >/dev/null \
    2>"$work/one.err" || fail "one process: $(cat "$work/one.err")"
[[ $(routing "$work/one.err" | wc -l) -eq 20 ]] || fail "no routing report: $(cat "$work/one.err")"
grep -q "moe step 1 block 0 (layer 0): 128 tokens, [1-9][0-9]* of 256 choices dropped" \
    "$work/one.err" || fail "nothing dropped: $(routing "$work/one.err")"
# layout NAME RANKS ARGS...: against the one-process run $ref
ref=one
layout() {
    local name=$1 n=$2
    shift 2
    msrun_n "$n" "${moe[@]}" --steps 10 --loss-log "$work/$name" "$@" >/dev/null \
        2>"$work/$name.err" || fail "$name: $(cat "$work/$name.err")"
    close "$work/$name" "$work/$ref" 10 "$name"
    diff <(routing "$work/$ref.err") <(routing "$work/$name.err") >/dev/null ||
        fail "$name routes otherwise: $(diff <(routing "$work/$ref.err") <(routing "$work/$name.err"))"
}
# (ZeRO: everything sharded, 10 KB buckets; with dp > ep the experts'
# optimizer is sharded over the ranks holding the same experts too)
zs=(--zero-min-bytes 0 --bucket-mb 0.01)
layout ep2 2 --ep 2
layout ep4 4 --ep 4
layout ep2-dp4 4 --ep 2
layout ep2-zero1 2 --ep 2 --zero 1 "${zs[@]}"
layout ep2-dp4-zero1 4 --ep 2 --zero 1 "${zs[@]}"
layout ep2-zero2 2 --ep 2 --zero 2 "${zs[@]}"
layout ep1-dp2-zero2 2 --ep 1 --zero 2 "${zs[@]}"
layout ep2-dp4-zero3 4 --ep 2 --zero 3 "${zs[@]}"
layout ep4-zero3 4 --ep 4 --zero 3 "${zs[@]}"
# a MoE block every second layer of 4 (dense blocks between), one choice
# per token
every=(--layers 4 --moe-every 2 --top-k 1)
timeout 60 "$bin/train_gpt" "${moe[@]}" "${every[@]}" --steps 10 --loss-log "$work/one2" \
    >/dev/null 2>"$work/one2.err" || fail "one process, moe-every 2: $(cat "$work/one2.err")"
[[ $(routing "$work/one2.err" | grep -c "block 1 (layer 3)") -eq 10 ]] ||
    fail "moe-every 2: no routing of layer 3: $(routing "$work/one2.err")"
ref=one2
layout ep4-every2-zero1 4 --ep 4 --zero 1 "${zs[@]}" "${every[@]}"
layout ep2-dp4-every2-zero2 4 --ep 2 --zero 2 "${zs[@]}" "${every[@]}"
# GPipe on an uneven split: the one MoE block (layer 3) on the second stage
layout pp2-gpipe-uneven-every2 2 --pp 2 --schedule gpipe --pp-layers 3,1 "${every[@]}"

# the model-parallel runtime: MoE blocks on every pipeline stage, experts
# shared out over tp (each tp rank computes E / (ep x tp) of them), the
# recomputed forward counting no routing twice
ref=one
layout pp2 2 --pp 2
layout tp2 2 --tp 2
layout tp2-sp 2 --tp 2 --sp
layout pp2-full 2 --pp 2 --recompute full
layout tp2-selective 2 --tp 2 --recompute selective
layout ep2-tp2 4 --ep 2 --tp 2 --trace "$work/trace.json"
layout dp2-ep2-pp2-tp2-zero1 8 --ep 2 --pp 2 --tp 2 --zero 1 "${zs[@]}"
for span in "moe dispatch" "moe combine" "moe dispatch grad" "moe combine grad"; do
    grep -q "\"name\": \"$span\"" "$work/trace.json" || fail "no '$span' in the trace"
done
# interleaved virtual stages: 4 layers, one per virtual stage
timeout 60 "$bin/train_gpt" "${moe[@]}" --layers 4 --steps 10 --loss-log "$work/one4" \
    >/dev/null 2>"$work/one4.err" || fail "one process, 4 layers: $(cat "$work/one4.err")"
ref=one4
layout pp2-interleaved 2 --layers 4 --pp 2 --schedule interleaved --virtual-stages 2

# checkpoints: ep 2 on 4 ranks with ZeRO-2, stopped at step 3 and resumed,
# steps 4..5 are bitwise those of the run that never stopped; the same
# checkpoint resumed with ep 4 trains within 1e-5 of it
ck=("${moe[@]}" --ep 2 --zero 2 --zero-min-bytes 0 --bucket-mb 0.01 --steps 5)
msrun_n 4 "${ck[@]}" --loss-log "$work/whole" >/dev/null 2>"$work/err" ||
    fail "uninterrupted: $(cat "$work/err")"
msrun_n 4 "${ck[@]}" --steps 3 --ckpt-dir "$work/ck" --loss-log "$work/first" >/dev/null \
    2>"$work/err" || fail "first part: $(cat "$work/err")"
cp -r "$work/ck" "$work/ck4"
cp -r "$work/ck" "$work/ck1"
msrun_n 4 "${ck[@]}" --ckpt-dir "$work/ck" --resume --loss-log "$work/second" >/dev/null \
    2>"$work/err" || fail "resumed: $(cat "$work/err")"
grep -q "resumed from step 3" "$work/err" || fail "no resume: $(cat "$work/err")"
diff "$work/whole" <(cat "$work/first" "$work/second") ||
    fail "the resumed run differs from the uninterrupted one"
msrun_n 4 "${ck[@]}" --ep 4 --ckpt-dir "$work/ck4" --resume --loss-log "$work/second4" \
    >/dev/null 2>"$work/err" || fail "resumed with ep 4: $(cat "$work/err")"
python3 - "$work/whole" "$work/second4" <<'PY' || fail "ep 4 resume differs"
import sys
a = [l.split() for l in open(sys.argv[1])][3:]
b = [l.split() for l in open(sys.argv[2])]
assert len(a) == 2 and [r[1] for r in a] == [r[1] for r in b], (a, b)
worst = max(abs(float.fromhex(x[3]) - float.fromhex(y[3])) / abs(float.fromhex(x[3]))
            for x, y in zip(a, b))
print(f"resume ep 2 -> ep 4: max relative difference {worst:.3g}")
assert worst <= 1e-5, worst
PY
# and one process (ep 1, every expert) picks all of them out of the 4 payloads
msrun_n 1 "${ck[@]}" --ep 1 --ckpt-dir "$work/ck1" --resume --loss-log "$work/second1" \
    >/dev/null 2>"$work/err" || fail "resumed alone: $(cat "$work/err")"
grep -q "resumed from step 3 under .* (saved by 4 ranks)" "$work/err" || fail "$(cat "$work/err")"
python3 - "$work/whole" "$work/second1" <<'PY' || fail "the resume alone differs"
import sys
a = [l.split() for l in open(sys.argv[1])][3:]
b = [l.split() for l in open(sys.argv[2])]
assert len(a) == 2 and [r[1] for r in a] == [r[1] for r in b], (a, b)
worst = max(abs(float.fromhex(x[3]) - float.fromhex(y[3])) / abs(float.fromhex(x[3]))
            for x, y in zip(a, b))
print(f"resume ep 2 x dp 4 -> one process: max relative difference {worst:.3g}")
assert worst <= 1e-5, worst
PY
# the report says how many experts a rank holds: 2 blocks x 2 experts x
# (8 C^2 + 5 C) floats; with ZeRO and two ranks per expert, half the moments
msrun_n 2 "${moe[@]}" --steps 1 --ep 2 >/dev/null 2>"$work/err" || fail "$(cat "$work/err")"
grep -q "rank 1 experts: 2 of 4 per MoE block held here: params 34048 grads 34048 optim 68096" \
    "$work/err" || fail "no expert memory in the report: $(cat "$work/err")"
msrun_n 4 "${moe[@]}" --steps 1 --ep 2 --zero 1 >/dev/null 2>"$work/err" ||
    fail "$(cat "$work/err")"
grep -q "rank 3 experts: 2 of 4 per MoE block held here: params 34048 grads 34048 optim 34048" \
    "$work/err" || fail "no sharded expert moments in the report: $(cat "$work/err")"
# another MoE setting is refused (the checkpoint's meta names it)
refuse 4 "other settings" "${ck[@]}" --capacity-factor 2 --ckpt-dir "$work/ck4" --resume
# model-parallel checkpoints on 4 ranks, stopped at step 3 and resumed:
# bitwise; resumed with ep 1 (each rank all the experts of its stage, or
# under tp its share of all of them, some saved by the other tp rank):
# within 1e-5. mp_ckpt NAME ARGS...
mp_ckpt() {
    local name=$1
    shift
    local mk=("${moe[@]}" --ep 2 "${zs[@]}" --steps 5 "$@")
    msrun_n 4 "${mk[@]}" --loss-log "$work/$name-whole" >/dev/null 2>"$work/err" ||
        fail "$name uninterrupted: $(cat "$work/err")"
    msrun_n 4 "${mk[@]}" --steps 3 --ckpt-dir "$work/$name" --loss-log "$work/$name-first" \
        >/dev/null 2>"$work/err" || fail "$name first part: $(cat "$work/err")"
    cp -r "$work/$name" "$work/$name-ep1"
    msrun_n 4 "${mk[@]}" --ckpt-dir "$work/$name" --resume --loss-log "$work/$name-second" \
        >/dev/null 2>"$work/err" || fail "$name resumed: $(cat "$work/err")"
    grep -q "resumed from step 3" "$work/err" || fail "no resume: $(cat "$work/err")"
    diff "$work/$name-whole" <(cat "$work/$name-first" "$work/$name-second") ||
        fail "the resumed $name run differs from the uninterrupted one"
    msrun_n 4 "${mk[@]}" --ep 1 --ckpt-dir "$work/$name-ep1" --resume \
        --loss-log "$work/$name-second1" >/dev/null 2>"$work/err" ||
        fail "$name resumed with ep 1: $(cat "$work/err")"
    python3 - "$work/$name-whole" "$work/$name-second1" "$name" <<'PY' ||
import sys
a = [l.split() for l in open(sys.argv[1])][3:]
b = [l.split() for l in open(sys.argv[2])]
assert len(a) == 2 and [r[1] for r in a] == [r[1] for r in b], (a, b)
worst = max(abs(float.fromhex(x[k]) - float.fromhex(y[k])) / abs(float.fromhex(x[k]))
            for x, y in zip(a, b) for k in (3, 5))
print(f"resume {sys.argv[3]} -> ep 1: max relative difference {worst:.3g}")
assert worst <= 1e-5, worst
PY
        fail "$name resumed with ep 1 differs"
}
mp_ckpt pp2-ep2-zero1 --pp 2 --zero 1
mp_ckpt tp2-sp-ep2-zero2 --tp 2 --sp --zero 2
echo "train_gpt MoE and expert parallel: ok"
