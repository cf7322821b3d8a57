#!/usr/bin/env bash
# train_gpt --device cuda on a GPT-2 124M-shaped model: tokens per second
# and model FLOPs utilisation (MFU), printed beside llm.c's published
# figures for the same shape. Needs a GPU (exits 2 with the reason if none).
#
#   bench/train/gpu_bench.sh [BUILD_DIR] [STEPS] [MICRO_BATCH]
#
# Shape: layers 12, channels 768, heads 12, sequence 1024 (GPT-2 124M's),
# but our vocabulary is 256 bytes, not GPT-2's 50257 BPE tokens: the tied
# embedding/head matrix is 256 x 768 (0.2M parameters) instead of 50257 x
# 768 (38.6M), so the model has 86.0M parameters, not 124.4M, and its head
# costs 1.2 MFLOP per token instead of 231.6 MFLOP.
#
# FLOPs per token (the convention of llm.c and the PaLM paper: matrix
# products only, backward = 2 x forward):
#   6 * (12 L C^2 + V C)  every weight of the blocks and the tied head
#   + 12 L T C            attention's two T x T products, full square
# = 0.624 GFLOP per token here (0.854 with V = 50257). MFU = tok/s x that /
# the peak. Our fp32 path is on the CUDA cores (TF32 off, so the losses
# match the CPU's), so its MFU is against the fp32 peak; the second row
# trains with --precision bf16 (the products on the tensor cores, bf16
# operands and fp32 sums, attention fused into kernels that work a tile at
# a time, the rest fp32), as llm.c trains in bf16 and
# quotes MFU against the bf16 peak; the table gives each against both.
# Peaks (dense, per GPU) are read from the GPU's name or from
# MSRUN_PEAK_FP32_TFLOPS / MSRUN_PEAK_BF16_TFLOPS.
#
# MSRUN_GPU_BENCH_OFFLOAD=1 adds the fp32 run with --offload
# optimizer=host and with optimizer=host,params=host (below).
#
# MSRUN_GPU_BENCH_NP="2 4" also runs that many ranks under msrun on the
# GPUs there are (ranks sharing a GPU stage the gradients through host
# memory); the global batch grows with the ranks.
set -euo pipefail
build=${1:-build}
steps=${2:-20}
mb=${3:-8}
bin="$build/bin"
[[ -x "$bin/train_gpt" ]] || { echo "no $bin/train_gpt: build first" >&2; exit 1; }
tmp=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$tmp"; }' EXIT

if ! "$bin/train_gpt" --device cuda --steps 0 >"$tmp/probe" 2>&1; then
    echo "gpu_bench: train_gpt --device cuda cannot run here:" >&2
    cat "$tmp/probe" >&2
    exit 2
fi
L=12 C=768 NH=12 T=1024 V=256
name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)
fp32=${MSRUN_PEAK_FP32_TFLOPS:-}
bf16=${MSRUN_PEAK_BF16_TFLOPS:-}
case "$name" in
*H100*PCIe*) fp32=${fp32:-51} bf16=${bf16:-756} ;;
*H100* | *H200*) fp32=${fp32:-67} bf16=${bf16:-989} ;;
*A100*) fp32=${fp32:-19.5} bf16=${bf16:-312} ;;
esac
[[ -n "$fp32" && -n "$bf16" ]] || {
    echo "gpu_bench: unknown GPU '$name': set MSRUN_PEAK_FP32_TFLOPS and MSRUN_PEAK_BF16_TFLOPS" >&2
    exit 2
}
flops=$((6 * (12 * L * C * C + V * C) + 12 * L * T * C))
params=$((V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C))
shape=(--layers $L --channels $C --heads $NH --seq $T --micro-batch "$mb" --steps "$steps"
    --device cuda --lr 6e-4 --warmup 2)

echo "GPU: $name (peaks: fp32 $fp32, bf16 $bf16 TFLOPS); $params parameters;" \
    "$flops FLOP per token; micro-batch $mb x $T tokens; $steps steps"
echo
echo "| run | ranks | ms/step | tokens/s per GPU | MFU vs fp32 peak | MFU vs bf16 peak |"
echo "|---|---|---|---|---|---|"
row() { # NAME RANKS GPUS [bf16]: reads train_gpt's summary line from $tmp/err
    local line ms tps
    line=$(grep "after the first:" "$tmp/err" | tail -n 1)
    ms=$(sed -E 's/.*first: ([0-9.]+) ms\/step.*/\1/' <<<"$line")
    tps=$(sed -E 's/.* ([0-9]+) tok\/s.*/\1/' <<<"$line")
    # a bf16 run against the fp32 peak would say nothing: "-"
    awk -v n="$1" -v r="$2" -v g="$3" -v ms="$ms" -v t="$tps" -v f="$flops" -v p32="$fp32" \
        -v p16="$bf16" -v b="${4:-}" 'BEGIN { t /= g
            m32 = b == "bf16" ? "-" : sprintf("%.1f%%", 100 * t * f / (p32 * 1e12))
            printf "| %s | %d | %.1f | %.0f | %s | %.1f%% |\n",
            n, r, ms, t, m32, 100 * t * f / (p16 * 1e12) }'
}
"$bin/train_gpt" "${shape[@]}" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
row "train_gpt --device cuda alone (fp32)" 1 1
cp "$tmp/err" "$tmp/err.fp32"
"$bin/train_gpt" "${shape[@]}" --precision bf16 >"$tmp/out" 2>"$tmp/err" || {
    cat "$tmp/err" >&2
    exit 1
}
row "train_gpt --device cuda alone (bf16 products)" 1 1 bf16
# MSRUN_GPU_BENCH_OFFLOAD=1: the fp32 run again with AdamW on the host
# (--offload optimizer=host), then with the blocks there too
# (params=host: two blocks on the GPU at a time), and each run's device
# memory for the model after the table
mem=()
if [[ -n ${MSRUN_GPU_BENCH_OFFLOAD:-} ]]; then
    mem+=("fp32: $(grep -o '[0-9.]* MB of device memory' "$tmp/err.fp32" | head -n 1)")
    for off in optimizer=host optimizer=host,params=host; do
        "$bin/train_gpt" "${shape[@]}" --offload "$off" >"$tmp/out" 2>"$tmp/err" || {
            cat "$tmp/err" >&2
            exit 1
        }
        row "train_gpt --device cuda alone (fp32, --offload $off)" 1 1
        mem+=("$off: $(grep -o '[0-9.]* MB of device memory' "$tmp/err" | head -n 1)")
    done
fi
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
[[ $gpus -ge 1 ]] || gpus=1
for np in ${MSRUN_GPU_BENCH_NP:-}; do
    used=$((np < gpus ? np : gpus))
    timeout 1800 "$bin/msrun" --worker_num="$np" --local_worker_num="$np" "$bin/train_gpt" \
        "${shape[@]}" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
    row "msrun, $np ranks on $used GPU(s), $(grep -o 'gradients over [a-z]*' "$tmp/err" |
        head -n 1 | cut -d' ' -f3)" "$np" "$used"
done
for m in "${mem[@]}"; do
    echo "device memory for the model, $m"
done
echo
echo "llm.c's published figures for GPT-2 124M (vocabulary 50304 padded, bf16, cuDNN flash"
echo "attention), tokens/s per GPU derived from the time for 10B tokens:"
echo "| llm.c run | tokens/s per GPU | MFU (bf16 peak) |"
echo "|---|---|---|"
echo "| 8x A100 80GB SXM, 10B tokens in ~90 min (discussion #481) | ~231,000 | up to ~60% |"
echo "| 8x H100, 10B tokens in ~45 min (modded-nanogpt README) | ~463,000 | not stated |"
