#!/usr/bin/env bash
# Training speed of the 10.7M-parameter GPT (6 layers, 384 channels, 6
# heads, sequence 256, micro-batch 4) side by side, in one run, each
# program pinned to one core with one thread: train_gpt fp32, train_gpt
# --precision bf16, PyTorch fp32 and PyTorch under torch.autocast("cpu",
# dtype=torch.bfloat16) (bench/train/bf16_speed_torch.py), alternating for
# ROUNDS rounds, with the ratios against issue 42's goals (bf16 at least
# 1.6x train_gpt fp32 and at least 1.3x PyTorch bf16).
#
# Rates are tokens per CPU second, so that other work on a shared core does
# not count: train_gpt's is the CPU time of a run of WARMUP + STEPS steps
# minus that of a run of WARMUP steps (start-up, data and the first steps
# cancel); PyTorch's is the thread's CPU time over STEPS steps after
# WARMUP. The median over the rounds is printed, with the load average.
# With BASE, another build (say, the commit before a change), each round
# also runs BASE's train_gpt --precision bf16 right after BUILD's, so that
# the two builds alternate under the same load; its row is added. Each
# train_gpt runs on its own build's lib/ (a copy of a build directory
# keeps the RUNPATH of the one it was copied from).
#
#   bench/train/bf16_speed.sh [BUILD] [CORE] [STEPS] [ROUNDS] [BASE]
# (BUILD defaults to build, CORE to 0, STEPS to 4, ROUNDS to 1, BASE to
# none; WARMUP is 2)
set -euo pipefail
build=${1:-build}
core=${2:-0}
steps=${3:-4}
rounds=${4:-1}
base=${5:-}
warmup=2
here=$(cd "$(dirname "$0")" && pwd)
bin="$build/bin/train_gpt"
[[ -x "$bin" ]] || { echo "no $bin: build first" >&2; exit 1; }
[[ -z "$base" || -x "$base/bin/train_gpt" ]] || { echo "no $base/bin/train_gpt" >&2; exit 1; }
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
work=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$work"; }' EXIT
model=(--layers 6 --channels 384 --heads 6 --seq 256 --micro-batch 4 --threads 1)
tokens=$((steps * 4 * 256))

# cpu_seconds PRECISION STEPS [BIN]: user + system seconds of one train_gpt run,
# with BIN's own build's libmsrun (its RUNPATH names the build it was linked
# in: a copy of an old build would otherwise run the new library)
cpu_seconds() {
    local b=${3:-$bin}
    timeout 900 /usr/bin/time -f "%U %S" -o "$work/time" taskset -c "$core" \
        env LD_LIBRARY_PATH="$(dirname "$(dirname "$b")")/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$b" \
        "${model[@]}" --precision "$1" --steps "$2" >/dev/null 2>"$work/err" ||
        { echo "train_gpt --precision $1 failed: $(cat "$work/err")" >&2; exit 1; }
    awk '{ print $1 + $2 }' "$work/time"
}
# train_gpt_rate PRECISION [BIN]
train_gpt_rate() {
    local long short
    long=$(cpu_seconds "$1" $((warmup + steps)) "${2:-$bin}")
    short=$(cpu_seconds "$1" "$warmup" "${2:-$bin}")
    awk -v t="$tokens" -v l="$long" -v s="$short" 'BEGIN { printf "%.1f", t / (l - s) }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for ((r = 0; r < rounds; r++)); do
    for p in fp32 bf16; do
        x=$(train_gpt_rate "$p")
        echo "train_gpt_$p $x" >>"$work/rates"
    done
    if [[ -n "$base" ]]; then
        x=$(train_gpt_rate bf16 "$base/bin/train_gpt")
        echo "base_bf16 $x" >>"$work/rates"
    fi
    timeout 900 taskset -c "$core" /usr/bin/python3 "$here/bf16_speed_torch.py" 6 384 6 256 4 \
        "$steps" "$warmup" fp32 bf16 >>"$work/rates"
done
rate() { awk -v n="$1" '$1 == n { print $2 }' "$work/rates" | median; }
f32=$(rate train_gpt_fp32) b16=$(rate train_gpt_bf16)
tf32=$(rate torch_fp32) tb16=$(rate torch_bf16)
path=$(timeout 60 env LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bin" --layers 1 --channels 32 --heads 4 --seq 16 \
    --micro-batch 1 --steps 0 --precision bf16 2>&1 >/dev/null |
    sed -n 's/^train_gpt: bf16 products on the \([a-z]*\) path.*/\1/p')
echo "core $core: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); $(uptime | sed 's/.*load/load/')"
echo "train_gpt bf16 products path: ${path:-?}; torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')"
echo "$rounds round(s) of $steps steps after $warmup, median, tokens per CPU second"
echo
echo "| run | tokens/s (CPU) | vs train_gpt fp32 | vs PyTorch bf16 |"
echo "|---|---|---|---|"
row() { awk -v n="$1" -v r="$2" -v a="$f32" -v b="$tb16" \
    'BEGIN { printf "| %s | %.0f | %.2fx | %.2fx |\n", n, r, r / a, r / b }'; }
row "train_gpt fp32" "$f32"
row "train_gpt bf16" "$b16"
[[ -z "$base" ]] || row "train_gpt bf16, BASE build" "$(rate base_bf16)"
row "PyTorch fp32" "$tf32"
row "PyTorch autocast bf16" "$tb16"
awk -v a="$f32" -v b="$b16" -v t="$tb16" 'BEGIN {
    printf "\ngoals: train_gpt bf16 / fp32 %.2fx (goal 1.6x: %s); train_gpt bf16 / PyTorch bf16 %.2fx (goal 1.3x: %s)\n",
        b / a, (b / a >= 1.6 ? "met" : "not met"), b / t, (b / t >= 1.3 ? "met" : "not met") }'
