#!/usr/bin/env bash
# train_gpt end to end: the per-step output format, refusals with exit
# status 2, checkpoints and a bitwise resume, a file as data, and runs under
# msrun.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
small=(--layers 1 --channels 32 --heads 2 --seq 32 --micro-batch 4)
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

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
refuse "do not divide into --heads 3" --heads 3
refuse "but the job has 1" --dp 2
refuse "not built yet" --zero 1
refuse "do not divide into tp 2" --tp 2
refuse "but the job has 1" --tp 2 --dp 1
refuse "need --ckpt-dir" --resume
refuse "no data" --data "$work/missing"
printf 'short' >"$work/short"
refuse "must be longer than the sequence" --data "$work/short" --seq 32
timeout 30 "$bin/train_gpt" --help | grep -q -- "--micro-batch" || fail "--help"

# one line per step, in the interface's format
timeout 60 "$bin/train_gpt" "${small[@]}" --steps 3 >"$work/out"
[[ $(wc -l <"$work/out") -eq 3 ]] || fail "want 3 lines: $(cat "$work/out")"
grep -v -E '^step [0-9]+ loss [0-9]+\.[0-9]{6} tok/s [0-9]+$' "$work/out" && fail "bad line above"
[[ $(cut -d' ' -f2 "$work/out" | tr '\n' ' ') == "1 2 3 " ]] || fail "steps $(cat "$work/out")"

# stopped at step 3 and resumed: steps 4..6 print the same losses as one run
timeout 60 "$bin/train_gpt" "${small[@]}" --steps 6 >"$work/whole"
timeout 60 "$bin/train_gpt" "${small[@]}" --steps 3 --ckpt-dir "$work/ck" --ckpt-every 2 >"$work/first"
[[ -f "$work/ck/step_00000002/MANIFEST" && -f "$work/ck/step_00000003/MANIFEST" ]] ||
    fail "checkpoints: $(ls -R "$work/ck")"
timeout 60 "$bin/train_gpt" "${small[@]}" --steps 6 --ckpt-dir "$work/ck" --resume \
    >"$work/second" 2>"$work/err"
grep -q "resumed from step 3" "$work/err" || fail "no resume: $(cat "$work/err")"
diff <(cut -d' ' -f1-4 "$work/whole") <(cut -d' ' -f1-4 "$work/first" "$work/second") ||
    fail "the resumed run differs from the uninterrupted one"
# other settings are refused; an empty directory starts from step 0
refuse "other settings" "${small[@]}" --steps 7 --lr 0.002 --ckpt-dir "$work/ck" --resume
timeout 60 "$bin/train_gpt" "${small[@]}" --steps 1 --ckpt-dir "$work/empty" --resume >"$work/out"
grep -q '^step 1 ' "$work/out" || fail "fresh start with --resume: $(cat "$work/out")"

# any file is a data set
head -c 20000 "$bin/train_gpt" >"$work/data.bin"
timeout 60 "$bin/train_gpt" "${small[@]}" --steps 2 --data "$work/data.bin" >"$work/out"
[[ $(wc -l <"$work/out") -eq 2 ]] || fail "--data: $(cat "$work/out")"

# under msrun: a world of one trains, a world of two with dp 1 is refused,
# and a world of two is dp 2 unless told otherwise. (In the sanitizer build
# leak checks are off for these runs: what msrun itself leaks at exit is the
# launcher's business; train_gpt's leaks are checked by the runs above.)
msrun_env=(env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")
timeout 60 "${msrun_env[@]}" "$bin/msrun" --worker_num=1 --local_worker_num=1 "$bin/train_gpt" "${small[@]}" \
    --steps 2 >"$work/out" 2>"$work/err" || fail "under msrun: $(cat "$work/err")"
[[ $(grep -c -E 'step [0-9]+ loss [0-9]+\.[0-9]{6} tok/s [0-9]+$' "$work/out") -eq 2 ]] ||
    fail "under msrun: $(cat "$work/out")"
rc=0
timeout 60 "${msrun_env[@]}" "$bin/msrun" --worker_num=2 --local_worker_num=2 "$bin/train_gpt" "${small[@]}" \
    --dp 1 >"$work/out" 2>"$work/err" || rc=$?
[[ $rc -eq 2 ]] || fail "msrun with 2 workers and dp 1 exited $rc, want 2"
grep -q "but the job has 2" "$work/err" || fail "no reason: $(cat "$work/err")"
for degrees in "" "--dp 2" "--tp 2" "--dp 2 --zero 1"; do # right count, not built yet
    rc=0
    # shellcheck disable=SC2086
    timeout 60 "${msrun_env[@]}" "$bin/msrun" --worker_num=2 --local_worker_num=2 "$bin/train_gpt" "${small[@]}" \
        $degrees >"$work/out" 2>"$work/err" || rc=$?
    [[ $rc -eq 2 ]] || fail "msrun, 2 workers, $degrees exited $rc, want 2"
    grep -q "not built yet" "$work/err" || fail "$degrees: no reason: $(cat "$work/err")"
done
echo "train_gpt CLI: ok"
