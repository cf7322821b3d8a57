#!/usr/bin/env bash
# Data parallel and ZeRO on this machine, under the real msrun:
#   1. tokens/s of train_gpt for dp 1, 2, 4 (micro-batch 8 per rank, so the
#      global batch grows with dp), stage 0 and 1;
#   2. the overlap: step, backward and post-backward wait times with each
#      bucket reduced as soon as it is ready (--overlap 1) and with every
#      bucket started after backward (--overlap 0), and the share of the
#      communication hidden;
#   3. ZeRO: the bytes a rank holds for each stage (dp 4) against the
#      formula (fp32: parameters 4P, gradients 4P, AdamW 8P; sharded 1/dp).
#
# usage: bench/train/dp_bench.sh [BUILD_DIR] [STEPS]
# Prints markdown tables; docs/model.md has the results and what they mean.
set -euo pipefail
build=${1:-build}
steps=${2:-12}
bin="$build/bin"
[[ -x "$bin/train_gpt" && -x "$bin/msrun" ]] || { echo "no $bin/train_gpt: build first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
default=(--layers 4 --channels 128 --heads 4 --seq 64 --micro-batch 8)
large=(--layers 6 --channels 256 --heads 8 --seq 128 --micro-batch 8)

# run N ARGS...: train_gpt on N workers; stderr kept in $tmp/err
run() {
    local n=$1
    shift
    timeout 600 "$bin/msrun" --worker_num="$n" --local_worker_num="$n" "$bin/train_gpt" \
        --steps "$steps" --report "$@" >"$tmp/out" 2>"$tmp/err"
}
# field NAME: the mean over ranks of "NAME <value>" in the report lines
field() {
    grep ' zero [0-3]: params' "$tmp/err" |
        awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) { s += $(i + 1); n++ } }
                       END { printf "%.1f", n ? s / n : 0 }'
}
tok_s() { sed -n 's/.*after the first: .* ms\/step, \([0-9]*\) tok\/s/\1/p' "$tmp/err"; }
ms_step() { sed -n 's/.*after the first: \([0-9.]*\) ms\/step.*/\1/p' "$tmp/err"; }

echo "## 1. Throughput (global tokens per second; micro-batch 8 per rank)"
echo
echo "| model | dp | zero | ms/step | tok/s | vs dp 1 |"
echo "|---|---|---|---|---|---|"
for shape in default large; do
    declare -n args=$shape
    base=""
    for dp in 1 2 4; do
        for zero in 0 1; do
            run $dp "${args[@]}" --zero $zero
            t=$(tok_s)
            [[ $dp -eq 1 && $zero -eq 0 ]] && base=$t
            printf '| %s | %d | %d | %s | %s | %s |\n' "$shape" $dp $zero "$(ms_step)" "$t" \
                "$(awk -v a="$t" -v b="$base" 'BEGIN { printf "%.2fx", a / b }')"
        done
    done
done

echo
echo "## 2. Overlap (dp 2, stage 0, large model; per step, ms)"
echo
echo "| bucket MiB | overlap | step | backward | bucket wait | buckets |"
echo "|---|---|---|---|---|---|"
for mb in 1 4 25; do
    for ov in 0 1; do
        run 2 "${large[@]}" --bucket-mb $mb --overlap $ov
        printf '| %s | %d | %s | %s | %s | %s |\n' $mb $ov "$(ms_step)" "$(field backward)" \
            "$(field bucket-wait)" "$(grep -m1 -o 'buckets [0-9]*' "$tmp/err" | cut -d' ' -f2)"
    done
done

echo
echo "## 3. ZeRO: bytes per rank (dp 4, default model, means over ranks)"
echo
echo "| zero | params | grads | AdamW | formula (params / grads / AdamW) | transient peak | peak RSS KiB |"
echo "|---|---|---|---|---|---|---|"
for zero in 0 1 2 3; do
    run 4 "${default[@]}" --zero $zero
    P=$(sed -n 's/.* of \([0-9]*\) elements.*/\1/p' "$tmp/err" | head -1)
    R=$(sed -n 's/.*, \([0-9]*\) replicated.*/\1/p' "$tmp/err" | head -1)
    S=$(awk -v p="$P" -v r="$R" 'BEGIN { printf "%.0f", (p - r) / 4 + r }')
    case $zero in
    0) f="$((4 * P)) / $((4 * P)) / $((8 * P))" ;;
    1) f="$((4 * P)) / $((4 * P)) / $((8 * S))" ;;
    2) f="$((4 * P)) / $((4 * S)) / $((8 * S))" ;;
    3) f="$((4 * S)) / $((4 * S)) / $((8 * S))" ;;
    esac
    printf '| %d | %s | %s | %s | %s | %s | %s |\n' $zero "$(field params)" "$(field grads)" \
        "$(field optim)" "$f" "$(field transient-peak)" "$(field RSS)"
done
echo
echo "(P = $P parameters, $R of them replicated (segments under --zero-min-bytes); S = (P - R)/4 + R)"
