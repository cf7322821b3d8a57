#!/usr/bin/env bash
# bench/train/llama_bench.sh end to end (--smoke: 1 round of 2 steps): the
# table's four rows with train_gpt's parameter counts, positive step times
# whose tokens/s agree with them, and msrun / PyTorch (PyTorch's time over
# msrun's) on the msrun rows; a PyTorch Llama of another width refused by
# name (exit 1); bad arguments refused with exit 2 (STEPS = WARMUP, ROUNDS 0, an unknown option, no
# train_gpt). Skipped (exit 77) when /usr/bin/python3 cannot import torch.
# A bench, not a timing test: no figure is compared with another.
set -euo pipefail
if ! timeout 60 /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    echo "SKIP: /usr/bin/python3 cannot import torch (install python3-torch)"
    exit 77
fi
bench="$MSRUN_SOURCE/bench/train/llama_bench.sh"
work=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$work"; }' EXIT
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
# expect RC PATTERN CMD...: CMD exits RC and its stderr matches PATTERN
expect() {
    local want=$1 pat=$2 rc=0
    shift 2
    timeout 300 "$@" >"$work/out" 2>"$work/err" || rc=$?
    [[ $rc == "$want" ]] || fail "$* exited $rc, not $want: $(cat "$work/err")"
    grep -q -- "$pat" "$work/err" || fail "$*: no '$pat' in: $(cat "$work/err")"
}

# the arguments' bounds: STEPS must exceed WARMUP (3 of 3 refused; 2 of 1,
# --smoke, runs below), ROUNDS at least 1
expect 2 "must exceed WARMUP" env WARMUP=3 bash "$bench" "$MSRUN_BUILD" 1 3
expect 2 "ROUNDS must be at least 1" bash "$bench" "$MSRUN_BUILD" 0 20
expect 2 "is not a number" bash "$bench" "$MSRUN_BUILD" 1 2x
expect 2 "usage" bash "$bench" --rounds 3
expect 2 "no $work/bin/train_gpt" bash "$bench" "$work" 1 20

# a PyTorch Llama one width past train_gpt's: refused, naming both counts
printf '#!/bin/sh\nexec /usr/bin/python3 "$@" --ffn 336\n' >"$work/py"
chmod +x "$work/py"
expect 1 "the PyTorch llama has 844928 parameters, train_gpt's 832640" \
    env PYTHON="$work/py" bash "$bench" --smoke "$MSRUN_BUILD"

timeout 300 bash "$bench" --smoke "$MSRUN_BUILD" >"$work/table" 2>"$work/err" ||
    fail "--smoke: $(cat "$work/err")"
cat "$work/table"
# | model | parameters | implementation | ms (range) | tokens/s | ratio |
awk -F'|' '
    /^\| (GPT|Llama)/ {
        rows++
        ms = $5 + 0; tok = $6 + 0
        if (ms <= 0 || tok <= 0) { print "row " rows ": no positive figures: " $0; bad = 1 }
        # tokens/s = micro-batch 8 x seq 64 per step
        d = tok - 512000 / ms; if (d < -1 || d > 1) { print "row " rows ": tok/s " tok " is not 512000 / " ms; bad = 1 }
        want = rows % 2 ? "train_gpt" : "PyTorch"
        if (index($4, want) == 0) { print "row " rows " is not " want "s: " $0; bad = 1 }
        if (rows % 2 && $7 !~ /[0-9.]+x \([0-9.]+-[0-9.]+\)/) { print "row " rows ": no msrun / PyTorch: " $0; bad = 1 }
        params[rows] = $3
        # one round: msrun / PyTorch is the PyTorch ms over the msrun ms
        if (rows % 2) { msrun = ms; ratio = $7 + 0 }
        else if (ratio < 0.99 * ms / msrun || ratio > 1.01 * ms / msrun) {
            print "row " (rows - 1) ": msrun / PyTorch " ratio ", not " ms " / " msrun; bad = 1
        }
    }
    END {
        if (rows != 4) { print rows " rows, not 4"; bad = 1 }
        if (params[1] !~ / 834,304 / || params[2] !~ / 834,304 /) { print "GPT parameters: " params[1] params[2]; bad = 1 }
        if (params[3] !~ / 832,640 / || params[4] !~ / 832,640 /) { print "Llama parameters: " params[3] params[4]; bad = 1 }
        exit bad
    }' "$work/table" || fail "the table above"
grep -q "rounds 1, steps 2 (the first 1 of each left out)" "$work/table" || fail "the header"
echo "llama_bench: ok"
