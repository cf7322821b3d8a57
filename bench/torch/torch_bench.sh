#!/usr/bin/env bash
# torch.distributed's "msrun" backend against Gloo (bench/torch/torch_bench.py)
# on 2 and 4 local ranks under the real msrun, pinned with taskset, on
# /usr/bin/python3 with Debian's python3-torch: every collective from 8 B to
# 64 MiB, then DDP's step time. Prints markdown tables; docs/python.md has
# the results.
#
# usage: bench/torch/torch_bench.sh [BUILD_DIR] [NP...]
# Environment: CPUS (taskset -c list for the whole job; default: every CPU
# this shell may use), SIZES (comma-separated, K/M suffixes), ROUNDS (3),
# TARGET_S (0.1: seconds per timed batch), DDP_STEPS (5), WHAT (all,
# collectives or ddp), OPS (comma-separated collectives: all_reduce,
# broadcast, reduce, all_gather, reduce_scatter, all_to_all; default all).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build}
shift || true
nps=("$@")
[ ${#nps[@]} -eq 0 ] && nps=(2 4)
ls "$build"/lib/_msrun_c10d*.so >/dev/null 2>&1 || {
    echo "torch_bench.sh: no torch backend in $build/lib (build with libtorch-dev and pybind11-dev)" >&2
    exit 2
}
py=/usr/bin/python3
cpus=${CPUS:-$(taskset -pc $$ | sed 's/.*: //')}
export PYTHONPATH=$here/python${PYTHONPATH:+:$PYTHONPATH}
export MSRUN_LIBRARY=$build/lib/libmsrun.so
echo "$(date -u '+%F %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg);" \
    "CPUs $cpus ($(taskset -c "$cpus" nproc) usable); $(uname -m);" \
    "torch $("$py" -c 'import torch; print(torch.__version__)')"
for np in "${nps[@]}"; do
    echo
    taskset -c "$cpus" timeout 3600 "$build/bin/msrun" --worker_num="$np" --local_worker_num="$np" \
        --log_level=warn --python "$py" "$here/bench/torch/torch_bench.py" "${WHAT:-all}" |
        sed 's/^\[node 0 rank 0\] //'
done
