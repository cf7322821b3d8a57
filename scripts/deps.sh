#!/bin/bash
# Installs the Debian packages msrun needs that are missing.
#   scripts/deps.sh build   what building and running msrun needs (and NumPy,
#                           for the Python example of the README)
#   scripts/deps.sh test    that, plus what the test suite and benchmarks use
#                           (Open MPI and PyTorch as peers, clang for fuzzing,
#                           python3-clang for scripts/mutagen.py's mutants)
set -euo pipefail
what=${1:-build}
build=(build-essential cmake pkg-config libevent-dev libgrpc-dev protobuf-c-compiler
    libprotobuf-c-dev libucx-dev ucx-utils libopenblas-dev libhwloc-dev libmunge-dev python3
    python3-numpy) # the README's Python example (and the quick start) imports numpy
build+=(libdnnl-dev) # optional: oneDNN, the bf16 products' onednn path (model/gemm_bf16.h)
build+=(liburing-dev) # optional: the optimizer offload's io_uring engine (parallel/offload.h)
build+=(libtorch-dev pybind11-dev) # optional: torch.distributed's msrun backend (python/c10d)
test=(openmpi-bin libopenmpi-dev python3-torch clang libclang-rt-14-dev python3-clang
    iproute2 procps openssl etcd-server etcd-client python3-yaml munge slurmd slurmctld slurm-client
    prometheus chromium
    openssh-server openssh-client)
pkgs=("${build[@]}")
[ "$what" = test ] && pkgs+=("${test[@]}")
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "deps: everything needed is installed"
    exit 0
fi
echo "deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo=sudo
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
