#!/usr/bin/env bash
# msrun's allreduce from Python against torch.distributed over Gloo, side by
# side (bench/python/allreduce_bench.py), for 4 KiB .. 64 MiB on 2 and 4
# local ranks under the real msrun, on /usr/bin/python3 with Debian's
# python3-numpy and python3-torch. Prints one markdown table per rank
# count; docs/python.md has the results.
#
# usage: bench/python/allreduce_bench.sh [BUILD_DIR] [NP...]
# Environment: CPUS (taskset -c list for the whole job; default: every CPU
# this shell may use), SIZES (comma-separated, K/M suffixes), ROUNDS (3),
# TARGET_S (0.3: seconds per timed batch).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build}
shift || true
nps=("$@")
[ ${#nps[@]} -eq 0 ] && nps=(2 4)
[ -x "$build/bin/msrun" ] && [ -f "$build/lib/libmsrun.so" ] || {
    echo "allreduce_bench.sh: build first (cmake -B build && cmake --build build)" >&2
    exit 2
}
py=/usr/bin/python3
"$py" -c 'import numpy, torch, torch.distributed' || {
    echo "allreduce_bench.sh: $py needs numpy and torch (Debian: python3-numpy python3-torch)" >&2
    exit 2
}
cpus=${CPUS:-$(taskset -pc $$ | sed 's/.*: //')}
export PYTHONPATH=$here/python${PYTHONPATH:+:$PYTHONPATH}
export MSRUN_LIBRARY=$build/lib/libmsrun.so
args=()
[ -n "${SIZES:-}" ] && args=("$SIZES")
# comm_bench takes plain byte counts
c_sizes=$(echo "${SIZES:-4K,64K,1M,4M,16M,64M}" | tr '[:lower:]' '[:upper:]' |
    awk -v RS=, '{ n = $0 + 0; if ($0 ~ /K/) n *= 1024; if ($0 ~ /M/) n *= 1048576; printf "%s%d", (NR > 1 ? "," : ""), n }')
echo "$(date -u '+%F %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg);" \
    "CPUs $cpus ($(taskset -c "$cpus" nproc) usable); $(uname -m);" \
    "torch $("$py" -c 'import torch; print(torch.__version__)')"
for np in "${nps[@]}"; do
    echo
    # every rank's threads (torch's, Gloo's, UCX's) share the CPUs given
    taskset -c "$cpus" timeout 1800 "$build/bin/msrun" --worker_num="$np" --local_worker_num="$np" \
        --log_level=warn --python "$py" "$here/bench/python/allreduce_bench.py" "${args[@]}" |
        sed 's/^\[node 0 rank 0\] //'
    # the same from C, right after (not alternating: compare with care), to
    # show what Python adds
    if [ -x "$build/bin/comm_bench" ]; then
        echo
        echo "msrun from C (build/bin/comm_bench), the same sizes, run right after:"
        taskset -c "$cpus" timeout 600 "$build/bin/msrun" --worker_num="$np" --local_worker_num="$np" \
            --log_level=warn "$build/bin/comm_bench" --op allreduce --sizes "$c_sizes" |
            sed 's/^\[node 0 rank 0\] //'
    fi
done
