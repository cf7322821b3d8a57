#!/usr/bin/env bash
# train_gpt end to end: the per-step output format, refusals with exit
# status 2, a file as data; under msrun: data parallel with ZeRO prints the
# losses of one process, checkpoints through libmsrun, a resume equal to the
# uninterrupted run bitwise, and resumes into other world sizes.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
small=(--layers 1 --channels 32 --heads 2 --seq 32 --micro-batch 4)

job_prefix=cli # msrun_n N ARGS... (job_env.sh): under msrun with N workers

# refused before training, with a message and exit status 2
refuse() { # refuse PATTERN ARGS...
    local pattern=$1 rc=0
    shift
    timeout 30 "$bin/train_gpt" "$@" >"$work/out" 2>"$work/err" || rc=$?
    [[ $rc -eq 2 ]] || fail "train_gpt $* exited $rc, want 2"
    grep -q -- "$pattern" "$work/err" || fail "train_gpt $*: no '$pattern' in: $(cat "$work/err")"
    [[ ! -s "$work/out" ]] || fail "train_gpt $* trained: $(cat "$work/out")"
}
refuse "unknown option '--bogus'" --bogus 1
refuse "needs a value" --layers
refuse "not an integer" --layers abc
refuse "not an integer" --seq 100000
refuse "not a number" --lr fast
refuse "not an integer in \[0, 3\]" --zero 4
refuse "not an integer in \[0, 1\]" --overlap 2
refuse "not a number" --bucket-mb 0
refuse "do not divide into --heads 3" --heads 3
refuse "but the job has 1" --dp 2
refuse "do not divide into tp 2" --tp 2
refuse "but the job has 1" --tp 2 --dp 1
refuse "not a multiple of micro-batch 4 x dp 1" --micro-batch 4 --global-batch 6
refuse "need --ckpt-dir" --resume
refuse "need --ckpt-dir" --ckpt-keep 2
refuse "run under msrun" --ckpt-dir "$work/ck"
refuse "no data" --data "$work/missing"
printf 'short' >"$work/short"
refuse "the data (5 tokens) must be longer than the sequence (32)" --data "$work/short" --seq 32
# (into a file: grep -q leaving early would break a longer help's pipe)
timeout 30 "$bin/train_gpt" --help >"$work/help" || fail "--help exited $?"
grep -q -- "--zero-min-bytes" "$work/help" || fail "--help"

# one line per step, in the interface's format; the exact log agrees
timeout 60 "$bin/train_gpt" "${small[@]}" --steps 3 --loss-log "$work/exact" >"$work/out"
[[ $(wc -l <"$work/out") -eq 3 ]] || fail "want 3 lines: $(cat "$work/out")"
grep -v -E '^step [0-9]+ loss [0-9]+\.[0-9]{6} tok/s [0-9]+$' "$work/out" && fail "bad line above"
[[ $(cut -d' ' -f2 "$work/out" | tr '\n' ' ') == "1 2 3 " ]] || fail "steps $(cat "$work/out")"
grep -q -E '^step 3 loss 0x1\.[0-9a-f]+p\+[0-9] norm 0x' "$work/exact" || fail "$(cat "$work/exact")"

# any file is a data set
head -c 20000 "$bin/train_gpt" >"$work/data.bin"
timeout 60 "$bin/train_gpt" "${small[@]}" --steps 2 --data "$work/data.bin" >"$work/out"
[[ $(wc -l <"$work/out") -eq 2 ]] || fail "--data: $(cat "$work/out")"

# under msrun: a world of two with dp 1 or tp 2 is refused with a reason
rc=0
msrun_n 2 "${small[@]}" --dp 1 >"$work/out" 2>"$work/err" || rc=$?
[[ $rc -eq 2 ]] || fail "msrun with 2 workers and dp 1 exited $rc, want 2"
grep -q "but the job has 2" "$work/err" || fail "no reason: $(cat "$work/err")"
rc=0
msrun_n 2 "${small[@]}" --tp 2 --heads 3 --channels 33 >"$work/out" 2>"$work/err" || rc=$?
[[ $rc -eq 2 ]] || fail "msrun, 2 workers, --tp 2 --heads 3 exited $rc, want 2"
grep -q "3 heads do not divide among tp 2 ranks" "$work/err" ||
    fail "--tp 2: no reason: $(cat "$work/err")"

# data parallel prints the losses of one process on the same global batch
# (printed to 6 decimals: within 2e-6; dp_worker checks 1e-5 relative on
# exact values): 2 workers x accum 2 = 1 process x accum 4
timeout 60 "$bin/train_gpt" "${small[@]}" --steps 4 --grad-accum 4 >"$work/one"
for z in 0 3; do
    msrun_n 2 "${small[@]}" --steps 4 --grad-accum 2 --zero $z --bucket-mb 0.01 \
        >"$work/dp2" 2>"$work/err" || fail "dp 2 zero $z: $(cat "$work/err")"
    paste <(grep -o 'step.*loss [0-9.]*' "$work/one") <(grep -o 'step.*loss [0-9.]*' "$work/dp2") |
        awk '{ d = $4 - $8; if (d < 0) d = -d; if ($2 != $6 || d > 2e-6) bad = 1; n++ }
             END { exit bad || n != 4 }' ||
        fail "dp 2 zero $z differs from one process: $(paste "$work/one" "$work/dp2")"
done

# checkpoints: stopped at step 3 and resumed, steps 4..6 are bitwise those
# of the run that never stopped (dp 2, ZeRO-2; each rank writes its shard)
ck="$work/ck"
dp2=(--steps 6 --grad-accum 2 --zero 2 --bucket-mb 0.02)
msrun_n 2 "${small[@]}" "${dp2[@]}" --loss-log "$work/whole" >/dev/null 2>"$work/err" ||
    fail "uninterrupted: $(cat "$work/err")"
msrun_n 2 "${small[@]}" "${dp2[@]}" --steps 3 --ckpt-dir "$ck" --ckpt-every 2 \
    --loss-log "$work/first" >/dev/null 2>"$work/err" || fail "first part: $(cat "$work/err")"
for f in step-2/MANIFEST step-3/MANIFEST step-3/rank-0.bin step-3/rank-1.bin; do
    [[ -f "$ck/$f" ]] || fail "no $f: $(ls -R "$ck")"
done
cp -r "$ck" "$work/ck3" # as it was at step 3, for the resumes below
msrun_n 2 "${small[@]}" "${dp2[@]}" --ckpt-dir "$ck" --resume --loss-log "$work/second" \
    >/dev/null 2>"$work/err" || fail "resumed: $(cat "$work/err")"
grep -q "resumed from step 3" "$work/err" || fail "no resume: $(cat "$work/err")"
diff "$work/whole" <(cat "$work/first" "$work/second") ||
    fail "the resumed run differs from the uninterrupted one"

# the same checkpoint resumed by 4 workers (accum 1) and by 1 (accum 4, ZeRO
# 3), told the global batch (16): the same losses up to float rounding
for n in 4 1; do
    cp -r "$work/ck3" "$work/ck$n"
    msrun_n $n "${small[@]}" --steps 6 --global-batch 16 --zero $((n == 1 ? 3 : 1)) \
        --ckpt-dir "$work/ck$n" --resume >"$work/re$n" 2>"$work/err" ||
        fail "resume on $n: $(cat "$work/err")"
    grep -q "resumed from step 3 under .* (saved by 2 ranks)" "$work/err" ||
        fail "resume on $n: $(cat "$work/err")"
    paste <(tail -n 3 "$work/re$n" | grep -o 'step.*loss [0-9.]*') \
        <(msrun_n 2 "${small[@]}" "${dp2[@]}" 2>/dev/null | tail -n 3 | grep -o 'step.*loss [0-9.]*') |
        awk '{ d = $4 - $8; if (d < 0) d = -d; if ($2 != $6 || d > 2e-6) bad = 1; n++ }
             END { exit bad || n != 3 }' || fail "resumed on $n workers: $(cat "$work/re$n")"
done

# other settings are refused (exit 2, both texts shown); an empty directory
# starts from step 0
rc=0
msrun_n 2 "${small[@]}" "${dp2[@]}" --lr 0.002 --ckpt-dir "$ck" --resume >"$work/out" \
    2>"$work/err" || rc=$?
[[ $rc -eq 2 ]] || fail "other settings: exit $rc, want 2: $(cat "$work/err")"
grep -q "other settings" "$work/err" || fail "other settings: $(cat "$work/err")"
# the settings text counts the data in tokens (a byte-level corpus: its bytes)
grep -q "checkpoint: .*; data generated corpus (seed 1337, 1048576 bytes) (1048576 tokens)" \
    "$work/err" || fail "the settings' data: $(cat "$work/err")"
msrun_n 1 "${small[@]}" --steps 1 --ckpt-dir "$work/empty" --resume >"$work/out" 2>"$work/err" ||
    fail "fresh start: $(cat "$work/err")"
grep -q 'step 1 ' "$work/out" || fail "fresh start with --resume: $(cat "$work/out")"
# the main job (scripts/quickstart.sh): 4 workers, the default model, ZeRO
# stage 1, 20 steps; the loss falls from ln 256 by more than 2
msrun_n 4 --steps 20 --zero 1 >"$work/main" 2>"$work/err" || fail "main job: $(cat "$work/err")"
[[ $(grep -c -E 'step [0-9]+ loss [0-9]+\.[0-9]{6} tok/s [0-9]+$' "$work/main") -eq 20 ]] ||
    fail "main job: $(cat "$work/main")"
awk '/ step 1 loss / { first = $8 } / step 20 loss / { last = $8 }
     END { exit !(first > 5.4 && last < first - 2) }' "$work/main" ||
    fail "main job: the loss did not fall: $(cat "$work/main")"
echo "train_gpt CLI: ok"
