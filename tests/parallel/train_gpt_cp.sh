#!/usr/bin/env bash
# train_gpt with context parallel (--cp): layouts that cannot work are
# refused before training (exit 2, with the reason); the planner keeps a
# --cp given and --auto trains its plan; cp x tp with sequence
# parallel, cp x dp with ZeRO-1 and an odd ring (cp 3 x tp 2) print the
# losses of one process; the trace shows the ring's steps; --report counts
# the activations of the formula; a checkpoint written in a cp layout
# resumes in it bitwise, and is refused with other settings.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
job_prefix=cpcli
small=(--layers 2 --channels 32 --heads 4 --seq 16 --micro-batch 2)
refuse 2 "the sequence of 18 does not divide into 2 x cp = 4 chunks" "${small[@]}" --seq 18 --cp 2
refuse 3 "do not divide into tp 1 x pp 1 x cp 2" "${small[@]}" --cp 2
refuse 2 "x cp 2 = 4 ranks, but the job has 2" "${small[@]}" --cp 2 --dp 2
refuse 8 "sequence of 6 does not divide among tp 4" "${small[@]}" --seq 12 --cp 2 --tp 4 --sp
refuse 2 "the job's 2 ranks do not divide into dp 2 x cp 2" "${small[@]}" --cp 2 --dp 2 --plan

# the planner with --cp: every plan of --plan keeps cp 2 (the table's
# fifth column: # dp tp pp cp), and --auto trains on a mesh of cp 2 with
# the plan it prints
cluster=(--cluster "$work/cluster")
printf 'ranks_per_node = 4\nmem_gib = 1\npeak_tflops = 0.01\nintra_gbs = 1\n' >"$work/cluster"
msrun_n 4 "${small[@]}" --cp 2 --plan "${cluster[@]}" >"$work/plan" 2>"$work/err" ||
    fail "--cp 2 --plan: $(cat "$work/err")"
sed 's/^\[node [0-9]* rank [0-9]*\] //' "$work/plan" |
    grep -E '^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[01] ' >"$work/rows" || true
[[ -s "$work/rows" ]] || fail "--cp 2 --plan: no plans: $(cat "$work/plan")"
awk '{ if ($5 != 2 || $2 * $3 * $4 * $5 != 4) exit 1 }' "$work/rows" ||
    fail "--cp 2 --plan: a plan without cp 2: $(cat "$work/rows")"
msrun_n 4 "${small[@]}" --cp 2 --auto --steps 2 "${cluster[@]}" >"$work/out" 2>"$work/err" ||
    fail "--cp 2 --auto: $(cat "$work/err")"
grep -q "train_gpt: --auto: plan 1 of [0-9]*: dp [12] tp [12] pp [12] cp 2 " "$work/err" ||
    fail "--auto: not a cp 2 plan: $(cat "$work/err")"
grep -q "mesh dp [12] x pp [12] x cp 2 x tp [12]" "$work/err" ||
    fail "--auto: the runtime did not run cp 2: $(cat "$work/err")"
grep -q "step 2 loss" "$work/out" || fail "--auto with cp did not train: $(cat "$work/err")"

# cp 2 x tp 2 with sp and full recompute, traced; cp 2 x dp 2 with ZeRO-1:
# the losses of one process on the same global batch
timeout 60 "$bin/train_gpt" "${small[@]}" --steps 4 --grad-accum 4 >"$work/one"
msrun_n 4 "${small[@]}" --steps 4 --grad-accum 4 --cp 2 --tp 2 --sp --recompute full \
    --trace "$work/trace.json" >"$work/cptp" 2>"$work/err" || fail "cp x tp: $(cat "$work/err")"
same_losses "$work/one" "$work/cptp" 4 ||
    fail "cp x tp differs from one process: $(paste "$work/one" "$work/cptp")"
grep -q "mesh dp 1 x pp 1 x cp 2 x tp 2 with sequence parallel" "$work/err" ||
    fail "$(cat "$work/err")"
python3 - "$work/trace.json" <<'PY' || fail "trace: $(head -c 2000 "$work/trace.json")"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
x = [e for e in ev if e["ph"] == "X"]
for r in range(4):
    names = {e["name"] for e in x if e["pid"] == r}
    assert {"ring fwd 0", "ring fwd 1", "ring bwd 0", "ring bwd 1", "ring wait"} <= names, (r, sorted(names))
meta = [e["args"]["name"] for e in ev if e["ph"] == "M"]
assert "rank 2 (dp 0 pp 0 cp 1 tp 0)" in meta, meta
PY
msrun_n 4 "${small[@]}" --steps 4 --grad-accum 2 --cp 2 --dp 2 --zero 1 --bucket-mb 0.02 \
    --zero-min-bytes 1024 --report >"$work/cpdp" 2>"$work/err" || fail "cp x dp: $(cat "$work/err")"
same_losses "$work/one" "$work/cpdp" 4 ||
    fail "cp x dp differs from one process: $(paste "$work/one" "$work/cpdp")"
# --report counts each rank's kept activations to the byte (docs/model.md,
# "Context parallel"): B 2, T/cp = 8 positions, N = 16 rows, C 32, 4 heads,
# MLP 128, vocabulary 256, 2 layers, no recompute; 1F1B on one stage holds
# one micro-batch's frame at a time, the one with the head
B=2 Tc=8 C=32 NH=4 H=128 V=256 L=2
N=$((B * Tc))
layer=$((4 * N * C + 4 * N + 3 * N * C + N * C + N * H + N * NH + N * H))
frame=$((4 * (N * C + L * layer + N * C + 2 * N + N * V)))
for r in 0 1 2 3; do
    grep -q "rank $r mp: stage 0 of 1, cp rank $((r % 2)) of 2, .*activations peak $frame bytes (a chunk's micro-batch keeps $((frame - 4 * (N * C + 2 * N + N * V))), with the head $frame)" "$work/err" ||
        fail "rank $r's activations are not $frame bytes: $(grep "rank $r mp:" "$work/err")"
done
# the work space: what full recompute drops, the blocks' and the head's
# buffers, the ring's K/V blocks, gradients and row statistics (floats);
# the ring's positions, the local and the step's tokens and targets (ints)
M=2 CP=2
scratch=$((3 * N * C + 4 * N + 4 * N * C + N * NH + 2 * N * H))
floats=$((scratch + 8 * N * C + 4 * N * C + 2 * N * H + Tc * Tc + 2 * N * V + 4 * N))
floats=$((floats + 8 * N * C + 3 * N * NH))
ints=$((CP * Tc + 2 * M * N + 2 * M * B * Tc * CP))
grep -q "rank 0 zero 1: .* work $((4 * floats + 4 * ints)) bytes" "$work/err" ||
    fail "the work space is not $((4 * floats + 4 * ints)) bytes: $(grep "rank 0 zero" "$work/err")"
# ZeRO-1 shards over dp x cp: the four ranks' shards (less the small
# segments every rank holds whole) cover the part once
sed -n 's/.*rank [0-3] zero 1: .*(shard \([0-9]*\) of \([0-9]*\) elements, \([0-9]*\) replicated).*/\1 \2 \3/p' \
    "$work/err" | awk '{ s += $1 - $3; p = $2; r = $3; n++ } END { exit n != 4 || s + r != p || r >= p / 4 }' ||
    fail "the shards do not cover the parameters once: $(grep "zero 1:" "$work/err")"

# an odd ring (cp 3: the previous and next rank differ, chunks of 2) with
# tp 2 and sp on 6 ranks
odd=(--layers 2 --channels 32 --heads 4 --seq 12 --micro-batch 2 --steps 3 --grad-accum 2)
timeout 60 "$bin/train_gpt" "${odd[@]}" >"$work/one3"
msrun_n 6 "${odd[@]}" --cp 3 --tp 2 --sp >"$work/cp3" 2>"$work/err" || fail "cp 3: $(cat "$work/err")"
same_losses "$work/one3" "$work/cp3" 3 ||
    fail "cp 3 differs from one process: $(paste "$work/one3" "$work/cp3")"

# checkpoints in a cp layout: cp 2 x dp 2, ZeRO-1 (shards over dp x cp),
# selective recompute; stopped at step 3 and resumed, steps 4..5 are
# bitwise those of the run that never stopped
args=("${small[@]}" --steps 5 --grad-accum 2 --cp 2 --dp 2 --zero 1 --zero-min-bytes 1024
    --recompute selective
    --bucket-mb 0.02)
msrun_n 4 "${args[@]}" --loss-log "$work/whole" >/dev/null 2>"$work/err" ||
    fail "uninterrupted: $(cat "$work/err")"
msrun_n 4 "${args[@]}" --steps 3 --ckpt-dir "$work/ck" --loss-log "$work/first" >/dev/null \
    2>"$work/err" || fail "first part: $(cat "$work/err")"
cp -r "$work/ck" "$work/ck2"
msrun_n 4 "${args[@]}" --ckpt-dir "$work/ck" --resume --loss-log "$work/second" >/dev/null \
    2>"$work/err" || fail "resumed: $(cat "$work/err")"
grep -q "resumed from step 3" "$work/err" || fail "no resume: $(cat "$work/err")"
diff "$work/whole" <(cat "$work/first" "$work/second") ||
    fail "the resumed run differs from the uninterrupted one"
# other settings are refused in any layout (another layout of the same
# model resumes: train_gpt_reshard.sh)
refuse 4 "other settings" "${args[@]}" --cp 1 --dp 4 --grad-accum 1 --tp 1 --pp 1 \
    --recompute full --seed 7 --ckpt-dir "$work/ck2" --resume
echo "train_gpt context parallel: ok"
