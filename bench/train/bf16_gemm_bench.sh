#!/bin/bash
# The bf16 products side by side, pinned to one core: fp32 sgemm, each bf16
# path of model/gemm_bf16.h and PyTorch's torch.matmul in fp32 and bf16
# (when /usr/bin/python3 has torch), with the core's measured fp32 FMA peak
# and, where the CPU has avx512_bf16, its measured vdpbf16ps peak.
#   bench/train/bf16_gemm_bench.sh [BUILD] [CORE] [SECONDS]
# (BUILD defaults to build, CORE to 0, SECONDS per product to 0.5)
set -euo pipefail
build=${1:-build}
core=${2:-0}
seconds=${3:-0.5}
here=$(cd "$(dirname "$0")" && pwd)
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
torch_file=$(mktemp)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -f "$torch_file"; }' EXIT
if timeout 60 /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    timeout 600 taskset -c "$core" /usr/bin/python3 "$here/bf16_gemm_torch.py" "$seconds" \
        >"$torch_file"
    echo "torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'), 1 thread"
else
    echo "no torch in /usr/bin/python3: its columns are n/a"
fi
echo "core $core: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
timeout 600 taskset -c "$core" "$build/bin/bf16_gemm_bench" --seconds "$seconds" \
    --torch "$torch_file"
