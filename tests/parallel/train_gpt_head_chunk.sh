#!/usr/bin/env bash
# train_gpt --head-chunk in one process: one chunk (the vocabulary's rows
# exactly, one past, the option's largest) gives the whole head's losses
# and gradient norms bitwise, on the whole-model path (no recompute) and on
# the model-parallel runtime (full recompute), for the GPT's tied head, a
# Llama's untied lm_head and bf16 products; chunks that do not divide the
# vocabulary (one row under it, 48, 1) differ from it in the last bits and
# stay within 1e-5 of it at every step (loss and norm; in bf16 the loss
# within loss / 128, train_gpt_bf16.sh's bound for sums in another order);
# the validation of --val-data chunks its head too; the option's bounds
# and what it cannot run with are refused with exit status 2.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
small=(--layers 2 --channels 32 --heads 2 --seq 16 --micro-batch 2 --steps 6)

# run NAME ARGS...: the run's exact losses and norms in $work/NAME
run() {
    local name=$1
    shift
    rm -f "$work/$name"
    timeout 120 "$bin/train_gpt" "${small[@]}" "$@" --loss-log "$work/$name" >"$work/out" \
        2>"$work/err" || fail "train_gpt $*: $(tail -3 "$work/err")"
    [[ $(wc -l <"$work/$name") -eq 6 ]] || fail "train_gpt $*: $(cat "$work/$name")"
}
same() { # same A B: bitwise
    cmp -s "$work/$1" "$work/$2" || fail "$2 differs from $1: $(diff "$work/$1" "$work/$2")"
}
near() { # near A B PREC: not bitwise (the chunks ran), within PREC's bound at every step
    ! cmp -s "$work/$1" "$work/$2" || fail "$2 is bitwise $1: the chunks did not run"
    python3 - "$work/$1" "$work/$2" "$3" <<'PY' || fail "$2 is not within $3's bound of $1"
import sys
a, b = (open(p).read().split("\n") for p in sys.argv[1:3])
# fp32: loss and norm within 1e-5; bf16: the loss within loss / 128
bounds = {3: 1e-5, 5: 1e-5} if sys.argv[3] == "fp32" else {3: 1 / 128}
for x, y in zip(a, b):
    if not x:
        continue
    f, g = x.split(), y.split()
    for i, tol in bounds.items():
        u, v = float.fromhex(f[i]), float.fromhex(g[i])
        if abs(u - v) > tol * abs(u):
            sys.exit(f"{x} / {y}")
PY
}

for arch in gpt llama; do
    extra=()
    [[ $arch == gpt ]] || extra=(--arch llama --ffn 48 --kv-heads 1)
    for prec in fp32 bf16; do
        [[ $arch == gpt || $prec == fp32 ]] || continue
        a=("${extra[@]}" --precision "$prec")
        run whole "${a[@]}"
        run full "${a[@]}" --recompute full
        same whole full
        for hc in 256 257 1073741824; do
            run one "${a[@]}" --head-chunk "$hc"
            same whole one
            run one "${a[@]}" --recompute full --head-chunk "$hc"
            same whole one
        done
        for hc in 255 48 1; do
            run part "${a[@]}" --head-chunk "$hc"
            near whole part "$prec"
        done
        echo "ok: $arch $prec: one chunk bitwise the whole head's, 255, 48 and 1 rows within 1e-5"
    done
done

# the validation of --val-data holds no (N, V) buffer either (the whole
# model's chunked head, msr_gpt_create_chunked): at a learning rate too
# small to move any parameter's bits, one chunk's validation losses are the
# whole head's bitwise, and 48 and 1 rows' differ from them (the chunks
# ran) within 1e-5
job_tokens
val_run() { # val_run NAME ROWS: the validation lines in $work/NAME
    rm -f "$work/vlog"
    timeout 120 "$bin/train_gpt" --layers 2 --channels 32 --heads 4 --seq 16 --micro-batch 2 \
        --grad-accum 6 --steps 2 --lr 1e-12 --data "$work/train.bin" --val-data "$work/val.bin" \
        --epochs --val-every 1 --head-chunk "$2" --loss-log "$work/vlog" >"$work/out" \
        2>"$work/err" || fail "--val-data --head-chunk $2: $(tail -3 "$work/err")"
    grep '^val ' "$work/vlog" >"$work/$1"
    [[ $(wc -l <"$work/$1") -eq 2 ]] || fail "--head-chunk $2: $(cat "$work/vlog")"
}
val_run vwhole 0
val_run vone 100000
same vwhole vone
for hc in 48 1; do
    val_run vpart "$hc"
    ! cmp -s "$work/vwhole" "$work/vpart" || fail "--head-chunk $hc: the validation's head not chunked"
    python3 - "$work/vwhole" "$work/vpart" <<'PY' || fail "--head-chunk $hc: validation losses apart"
import sys
a, b = ([float.fromhex(l.split()[4]) for l in open(p)] for p in sys.argv[1:3])
assert all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)), (a, b)
PY
done
echo "ok: the validation's chunked head: one chunk bitwise, 48 and 1 rows within 1e-5"

# refused before training, with a message and exit status 2 (job_env.sh)
train_args=()
refuse 1 "not an integer in \[0, 1073741824\]" --head-chunk -1
refuse 1 "not an integer in \[0, 1073741824\]" --head-chunk 1073741825
refuse 1 "without .*--head-chunk" --head-chunk 5 --generate 4 --prompt ab
echo "ok: --head-chunk's bounds and --generate refused"
