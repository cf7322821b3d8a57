#!/usr/bin/env bash
# Token data end to end: scripts/make_tokens.py writes a token file and a
# validation file (llm.c's .bin layout); train_gpt trains on them with
# --epochs and prints validation losses that are the same in every layout
# (1e-5 relative), a MoE model's too; a run resumed mid-epoch on another
# world size prints the losses of a run never stopped (1e-5); bad token
# data is refused naming what is wrong, no step trained.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
job_tokens
# the model and its data, the options every msrun_n starts with (job_env.sh);
# G = 12 sequences a step in every layout
train_args=(--layers 2 --channels 32 --heads 4 --seq 16 --global-batch 12 --lr 3e-3
    --data "$work/train.bin" --val-data "$work/val.bin" --epochs)
job_prefix=tokens
# the $3 val lines of loss log $1 are in $2, equal to 1e-5 relative
same_val() {
    python3 - "$1" "$2" "$3" <<'PY' || fail "validation losses of $1 and $2 differ"
import sys
def val(p):
    return {l.split()[2]: float.fromhex(l.split()[4]) for l in open(p) if l.startswith("val ")}
a, b, n = val(sys.argv[1]), val(sys.argv[2]), int(sys.argv[3])
assert len(a) == n and set(a) <= set(b), (a, b)
for k in a:
    assert abs(a[k] - b[k]) <= 1e-5 * abs(a[k]), (k, a[k], b[k])
PY
}

# one process: validation every 2 steps and at the end, in nats per token
msrun_n 1 --micro-batch 2 --grad-accum 6 --steps 5 --val-every 2 --loss-log "$work/one.log" \
    >"$work/one.out" 2>"$work/one.err" || { cat "$work/one.err" >&2; fail "one process"; }
grep -q "nats per token" "$work/one.err" || fail "not read as tokens: $(cat "$work/one.err")"
[[ $(grep -c 'val step' "$work/one.out") -eq 3 ]] || fail "val lines: $(cat "$work/one.out")"
python3 - "$work/one.log" <<'PY' || fail "the validation loss did not fall: $(cat "$work/one.out")"
import sys
v = [float.fromhex(l.split()[4]) for l in open(sys.argv[1]) if l.startswith("val ")]
assert v[-1] < v[0] < 6.0, v  # below ln(356) at the start, falling
PY
# validating changes nothing in training: the step lines of a run without
# --val-data are the same, bitwise
val=()
for a in "${train_args[@]}"; do [[ $a == --val-data || $a == "$work/val.bin" ]] || val+=("$a"); done
# (one thread, as msrun gives its workers: the products' sums in one order)
OMP_NUM_THREADS=1 timeout -k 5 60 "$bin/train_gpt" "${val[@]}" --micro-batch 2 --grad-accum 6 --steps 5 \
    --loss-log "$work/noval.log" >/dev/null 2>&1 || fail "the run without validation"
cmp -s <(grep '^step' "$work/one.log") "$work/noval.log" || fail "validation changed the steps"
# the same validation losses in other layouts
for layout in "2 --micro-batch 3 --grad-accum 2 --zero 3" "4 --micro-batch 2 --grad-accum 6 --tp 2 --pp 2" \
    "2 --micro-batch 2 --grad-accum 6 --cp 2"; do
    read -r -a l <<<"$layout"
    msrun_n "${l[@]}" --steps 5 --val-every 2 --loss-log "$work/l.log" >/dev/null \
        2>"$work/l.err" || { cat "$work/l.err" >&2; fail "layout $layout"; }
    same_val "$work/one.log" "$work/l.log" 3
    rm -f "$work/l.log"
done

# the validation loss is computed in the precision the job trains in: at
# step 0 (the seed's parameters) bf16's differs from fp32's, and a bf16
# layout's equals one bf16 process's
msrun_n 1 --micro-batch 2 --grad-accum 6 --steps 0 --precision bf16 --loss-log "$work/b1.log" \
    >/dev/null 2>"$work/l.err" || { cat "$work/l.err" >&2; fail "bf16, one process"; }
msrun_n 1 --micro-batch 2 --grad-accum 6 --steps 0 --loss-log "$work/f1.log" >/dev/null \
    2>"$work/l.err" || { cat "$work/l.err" >&2; fail "fp32 at step 0"; }
cmp -s <(grep '^val' "$work/b1.log") <(grep '^val' "$work/f1.log") &&
    fail "bf16 validation prints fp32's loss: $(cat "$work/b1.log")"
msrun_n 2 --micro-batch 3 --grad-accum 2 --steps 0 --zero 3 --precision bf16 \
    --loss-log "$work/l.log" >/dev/null 2>"$work/l.err" || { cat "$work/l.err" >&2; fail "bf16 dp 2"; }
same_val "$work/b1.log" "$work/l.log" 1
rm -f "$work/l.log"

# a MoE model: its validation runs one sequence a forward pass, so the MoE
# blocks' capacity is the same whatever the layout's micro-batch
moe=(--experts 4 --top-k 2 --moe-every 1 --val-batches 2)
# at step 0 every layout holds the seed's parameters: micro-batches of 2
# and 3 give the same validation loss
msrun_n 1 "${moe[@]}" --steps 0 --micro-batch 2 --grad-accum 6 --loss-log "$work/moe0.log" \
    >/dev/null 2>"$work/l.err" || { cat "$work/l.err" >&2; fail "MoE at step 0"; }
msrun_n 2 "${moe[@]}" --steps 0 --micro-batch 3 --grad-accum 2 --ep 2 --loss-log "$work/l.log" \
    >/dev/null 2>"$work/l.err" || { cat "$work/l.err" >&2; fail "MoE at step 0, ep 2"; }
same_val "$work/moe0.log" "$work/l.log" 1
rm -f "$work/l.log"
# trained 3 steps (training's routing depends on the micro-batch: kept)
moe+=(--steps 3 --val-every 3 --micro-batch 2)
msrun_n 1 "${moe[@]}" --grad-accum 6 --loss-log "$work/moe1.log" >/dev/null 2>"$work/l.err" ||
    { cat "$work/l.err" >&2; fail "MoE, one process"; }
for layout in "2 --grad-accum 3 --ep 2" "4 --grad-accum 3 --pp 2 --dp 2 --ep 2 --zero 1"; do
    read -r -a l <<<"$layout"
    msrun_n "${l[0]}" "${moe[@]}" "${l[@]:1}" --loss-log "$work/l.log" >/dev/null \
        2>"$work/l.err" || { cat "$work/l.err" >&2; fail "MoE layout $layout"; }
    same_val "$work/moe1.log" "$work/l.log" 1
    rm -f "$work/l.log"
done

# an epoch is (2700 - 1) / 16 = 168 windows, 14 steps: stop at step 20
# (in the second epoch) on 2 ranks, resume on 1 to step 24
ref=(--micro-batch 2 --grad-accum 6 --steps 24 --val-every 24)
msrun_n 1 "${ref[@]}" --loss-log "$work/ref.log" >/dev/null 2>&1 || fail "the reference run"
msrun_n 2 --micro-batch 3 --grad-accum 2 --steps 20 --val-every 24 --ckpt-dir "$work/ck" \
    --loss-log "$work/part.log" >/dev/null 2>&1 || fail "the run stopped mid-epoch"
msrun_n 1 "${ref[@]}" --ckpt-dir "$work/ck" --resume --loss-log "$work/part.log" >/dev/null \
    2>"$work/resume.err" || { cat "$work/resume.err" >&2; fail "the resume"; }
python3 - "$work/ref.log" "$work/part.log" <<'PY' || fail "the resumed run's losses differ"
import sys
def steps(p):
    return {l.split()[1]: float.fromhex(l.split()[3]) for l in open(p) if l.startswith("step ")}
a, b = steps(sys.argv[1]), steps(sys.argv[2])
assert len(a) == 24 and a.keys() == b.keys(), (sorted(a), sorted(b))
for k in a:
    assert abs(a[k] - b[k]) <= 1e-5 * abs(a[k]), (k, a[k], b[k])
PY
same_val "$work/ref.log" "$work/part.log" 1
# without --epochs the checkpoint's settings differ: refused
plain=()
for a in "${train_args[@]}"; do [[ $a == --epochs ]] || plain+=("$a"); done
train_args=("${plain[@]}")
if msrun_n 1 "${ref[@]}" --ckpt-dir "$work/ck" --resume >/dev/null 2>"$work/e.err"; then
    fail "a resume without --epochs was accepted"
fi
grep -q "epochs" "$work/e.err" || fail "the refusal does not say epochs: $(cat "$work/e.err")"

# bad token data: a token past --vocab, a header counting too many tokens
expect_refused() { # words, then train_gpt's options
    local words=$1
    shift
    local rc=0
    timeout -k 5 60 "$bin/train_gpt" --layers 1 --channels 16 --heads 2 --seq 8 --steps 1 "$@" \
        >"$work/bad.out" 2>"$work/bad.err" || rc=$?
    [[ $rc -eq 2 ]] || fail "exit $rc for $*: $(cat "$work/bad.err")"
    grep -q "$words" "$work/bad.err" || fail "'$words' not in: $(cat "$work/bad.err")"
    ! grep -q 'step' "$work/bad.out" || fail "a step ran for $*"
}
expect_refused "byte offset" --data "$work/train.bin" --vocab 256
expect_refused "byte offset" --data "$work/train.bin" --val-data "$work/val.bin" --vocab 300
cp "$work/train.bin" "$work/short.bin"
truncate -s -2 "$work/short.bin"
expect_refused "counts 2700 tokens" --data "$work/short.bin"
echo "token data: ok"
