#!/usr/bin/env bash
# train_gpt --pp-layers, an uneven split of the layers into pipeline
# stages: bad splits are refused before training (exit 2, one line naming
# the fault: the count, an empty stage, the sum, a bad number); an uneven
# split prints the losses of one process; a split equal to the even one
# runs as if not given; a checkpoint of an uneven split resumes in it
# bitwise, and in another split with the losses of one process.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
job_prefix=split
small=(--layers 8 --channels 32 --heads 4 --seq 16 --micro-batch 2)
# refused before training (job_env.sh's refuse), alone in one line
refuse_line() {
    refuse "$@"
    [[ $1 -gt 1 || $(grep -c . "$work/err") -eq 1 ]] ||
        fail "train_gpt ${*:3}: not one line: $(cat "$work/err")"
}
pp2=(--pp 2 --grad-accum 4)
refuse_line 1 "3 entries for 2 virtual stages" "${small[@]}" "${pp2[@]}" --pp-layers 2,3,3
refuse_line 1 "4 entries for 2 virtual stages" "${small[@]}" "${pp2[@]}" --pp-layers 2,2,2,2
refuse_line 1 "2 entries for 4 virtual stages" "${small[@]}" "${pp2[@]}" --schedule interleaved \
    --virtual-stages 2 --pp-layers 4,4
refuse_line 1 "virtual stage 0 has 0 layers: every virtual stage needs at least 1" "${small[@]}" \
    "${pp2[@]}" --pp-layers 0,8
refuse_line 1 "the stages' layers sum to 7, not the 8 layers" "${small[@]}" \
    "${pp2[@]}" --pp-layers 3,4
refuse_line 1 "the stages' layers sum to 9, not the 8 layers" "${small[@]}" \
    "${pp2[@]}" --pp-layers 1,8
refuse_line 1 "entry 2 'x' is not a layer count" "${small[@]}" "${pp2[@]}" --pp-layers 3,x
refuse_line 1 "entry 2 is empty" "${small[@]}" "${pp2[@]}" --pp-layers 3,,5
refuse_line 1 "--pp-layers needs a non-empty value" "${small[@]}" "${pp2[@]}" --pp-layers=
refuse_line 1 "the stages' layers sum to 7, not the 8 layers" "${small[@]}" --pp-layers 7
refuse_line 2 "virtual stage 1 has 0 layers" "${small[@]}" "${pp2[@]}" --pp-layers 8,0
help=$(timeout 30 "$bin/train_gpt" --help) || fail "--help exit status"
grep -q -- "--pp-layers" <<<"$help" || fail "--help"

# uneven splits print the losses of one process on the same global batch
# (to the 6 printed decimals): pp 2 split 1,7 (1F1B); pp 2 x tp 2
# interleaved, split 1,3,3,1, sp and ZeRO-1
timeout 60 "$bin/train_gpt" "${small[@]}" --steps 3 --grad-accum 4 >"$work/one"
same_as_one() { # same_as_one FILE WHAT
    same_losses "$work/one" "$1" 3 || fail "$2 differs from one process: $(paste "$work/one" "$1")"
}
msrun_n 2 "${small[@]}" --steps 3 "${pp2[@]}" --pp-layers 1,7 >"$work/pp2" 2>"$work/err" ||
    fail "pp 2 split 1,7: $(cat "$work/err")"
same_as_one "$work/pp2" "pp 2 split 1,7"
grep -q "layers per virtual stage 1,7 (uneven split)" "$work/err" || fail "$(cat "$work/err")"
msrun_n 4 "${small[@]}" --steps 3 --grad-accum 4 --pp 2 --tp 2 --sp --zero 1 \
    --schedule interleaved --virtual-stages 2 --pp-layers 1,3,3,1 >"$work/pp2tp2" \
    2>"$work/err" || fail "pp 2 x tp 2 split 1,3,3,1: $(cat "$work/err")"
same_as_one "$work/pp2tp2" "pp 2 x tp 2 interleaved split 1,3,3,1"
grep -q "layers per virtual stage 1,3,3,1 (uneven split)" "$work/err" || fail "$(cat "$work/err")"
# the even split given explicitly is the default: nothing said of it
msrun_n 2 "${small[@]}" --steps 3 "${pp2[@]}" --pp-layers 4,4 >"$work/even" 2>"$work/err" ||
    fail "pp 2 split 4,4: $(cat "$work/err")"
same_as_one "$work/even" "pp 2 split 4,4"
grep -q "uneven split" "$work/err" && fail "the even split called uneven: $(cat "$work/err")"

# checkpoints: split 6,2 stopped at step 2 and resumed, step 3 is bitwise
# that of the run that never stopped; another split resumes from it
args=("${small[@]}" --steps 3 "${pp2[@]}" --pp-layers 6,2)
msrun_n 2 "${args[@]}" --loss-log "$work/whole" >/dev/null 2>"$work/err" ||
    fail "uninterrupted: $(cat "$work/err")"
msrun_n 2 "${args[@]}" --steps 2 --ckpt-dir "$work/ck" --loss-log "$work/first" >/dev/null \
    2>"$work/err" || fail "first part: $(cat "$work/err")"
cp -r "$work/ck" "$work/ck2"
msrun_n 2 "${args[@]}" --ckpt-dir "$work/ck" --resume --loss-log "$work/second" >/dev/null \
    2>"$work/err" || fail "resumed: $(cat "$work/err")"
grep -q "resumed from step 2" "$work/err" || fail "no resume: $(cat "$work/err")"
diff "$work/whole" <(cat "$work/first" "$work/second") ||
    fail "the resumed run differs from the uninterrupted one"
msrun_n 2 "${args[@]}" --pp-layers 5,3 --ckpt-dir "$work/ck2" --resume --loss-log "$work/other" \
    >/dev/null 2>"$work/err" || fail "resume in split 5,3: $(cat "$work/err")"
grep -q "resumed from step 2" "$work/err" || fail "no resume in split 5,3: $(cat "$work/err")"
python3 - "$work/second" "$work/other" <<'PY' || fail "split 5,3 after 6,2: $(paste "$work/second" "$work/other")"
import sys
a, b = [[l.split() for l in open(f) if l.strip()] for f in sys.argv[1:3]]
assert len(a) == len(b) == 1, (a, b)
for x, y in zip(a, b):  # step N loss L (hexadecimal floats)
    assert x[:2] == y[:2] and abs(float.fromhex(x[3]) - float.fromhex(y[3])) <= 1e-5 * abs(float.fromhex(y[3]))
PY
echo "train_gpt --pp-layers: ok"
