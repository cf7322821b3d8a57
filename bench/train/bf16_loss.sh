#!/usr/bin/env bash
# train_gpt's default model in fp32 and in bf16 (--precision bf16), the
# same seed and data, one process each pinned to one core: the final
# losses side by side (the goal: bf16 within 2% of fp32), both loss curves
# as an SVG, and each run's tokens/s: the median over the steps after the
# first two (wall time), and the tokens over the run's CPU time. Results: docs/model.md "bf16 training", docs/performance.md.
#
# usage: bench/train/bf16_loss.sh [BUILD_DIR] [STEPS] [CORE] [OUT_DIR]
#   defaults: build, 500, 0, BUILD_DIR/bf16_loss
set -euo pipefail
build=${1:-build}
steps=${2:-500}
core=${3:-0}
out=${4:-$build/bf16_loss}
bin="$build/bin/train_gpt"
here=$(cd "$(dirname "$0")" && pwd)
[[ -x "$bin" ]] || { echo "no $bin: build first" >&2; exit 1; }
mkdir -p "$out"

# each run's CPU time (user + system) as well as its wall time: on a shared
# core the wall time counts the other programs' turns, the CPU time does not
TIMEFORMAT='%U %S'
for p in fp32 bf16; do
    rm -f "$out/$p.loss"
    { time taskset -c "$core" "$bin" --precision "$p" --steps "$steps" --threads 1 \
        --loss-log "$out/$p.loss" >"$out/$p.out" 2>"$out/$p.err"; } 2>"$out/$p.time" ||
        { echo "train_gpt --precision $p failed:" >&2; cat "$out/$p.err" >&2; exit 1; }
done

# tok/s: the 6th field of "step N loss L tok/s X", after the first two steps
median_toks() {
    awk 'NR > 2 && $1 == "step" { print $6 }' "$1" | sort -n |
        awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
final_loss() { awk '$1 == "step" { l = $4 } END { print l }' "$1"; }
f32=$(final_loss "$out/fp32.out")
b16=$(final_loss "$out/bf16.out")
t32=$(median_toks "$out/fp32.out")
t16=$(median_toks "$out/bf16.out")
# tokens per CPU second: steps x micro-batch 8 x seq 64 (the defaults)
cpu_toks() { awk -v n="$((steps * 8 * 64))" '{ printf "%.0f", n / ($1 + $2) }' "$1"; }
c32=$(cpu_toks "$out/fp32.time")
c16=$(cpu_toks "$out/bf16.time")
echo "| precision | final loss ($steps steps) | vs fp32 | tok/s (median step, wall) | tok/s (CPU time) | vs fp32 (CPU time) |"
echo "|---|---|---|---|---|---|"
echo "| fp32 | $f32 | | $t32 | $c32 | |"
awk -v f="$f32" -v b="$b16" -v tb="$t16" -v cf="$c32" -v cb="$c16" 'BEGIN {
    printf "| bf16 | %s | %+.2f%% | %s | %s | %.2fx |\n", b, 100 * (b - f) / f, tb, cb, cb / cf }'
python3 "$here/loss_svg.py" "$out/bf16_loss.svg" "train_gpt default model: fp32 vs bf16" \
    "fp32=$out/fp32.out" "bf16=$out/bf16.out"
echo "curves: $out/bf16_loss.svg"
