#!/usr/bin/env bash
# The cost of msr_ps_durable_fsync (docs/ps.md "Failures"): one worker
# pushes one row of one float PUSHES times to one durable server
# (asynchronous, no checkpoint during the run) whose log is synced every N
# records, for N = 0 (never), 1 (before each acknowledgement), 16 and 256;
# and without msr_ps_durable at all. Prints a markdown table of the
# worker's pushes/s and microseconds per push, the median of RUNS runs.
# The log goes to DIR (default: a directory made under the build
# directory, so on its disk, not a tmpfs).
#
# usage: bench/ps/fsync_bench.sh [BUILD_DIR] [PUSHES] [RUNS] [DIR]
set -euo pipefail
build=${1:-build}
pushes=${2:-2000}
runs=${3:-3}
[[ -x "$build/bin/msrun" && -x "$build/tests/ps_worker" ]] ||
    { echo "no $build/tests/ps_worker: build first" >&2; exit 1; }
base=${4:-$build}
tmp=$(mktemp -d "$base/fsync-bench.XXXXXX")
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$tmp"; }' EXIT
df -T "$tmp" | tail -1 | awk '{print "log on " $1 " (" $2 ")"}'

# one_run N: the worker's "us each" for one run (N "none": not durable)
one_run() {
    local args=("$tmp/shards" "$1" "$pushes" 100000000)
    rm -rf "$tmp/shards"
    [[ $1 == none ]] && args=("$tmp/shards" 0 "$pushes" 0)
    "$build/bin/msrun" --worker_num=2 --local_worker_num=2 --ps_servers=1 \
        "$build/tests/ps_worker" fsync "${args[@]}" 2>/dev/null |
        sed -n 's/.*pushes\/s, \([0-9.]*\) us each.*/\1/p'
}

echo "| log synced every | us per push (median of $runs) | pushes/s |"
echo "|---|---|---|"
for n in none 0 256 16 1; do
    vals=()
    for ((r = 0; r < runs; r++)); do vals+=("$(one_run "$n")"); done
    med=$(printf '%s\n' "${vals[@]}" | sort -g | sed -n "$(((runs + 1) / 2))p")
    label=$n
    [[ $n == none ]] && label="not durable"
    [[ $n == 0 ]] && label="0 (never)"
    awk -v l="$label" -v m="$med" 'BEGIN { printf "| %s | %.1f | %.0f |\n", l, m, 1e6 / m }'
done
