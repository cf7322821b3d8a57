#!/bin/bash
# Runs the fault suite RUNS times in a row (each run picks its fault timings
# and victims at random) and prints how many runs passed, per scenario.
#   scripts/fault-soak.sh [RUNS] [BUILD]          (defaults 20 and build)
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
build=${2:-build}
[ -x "$build/tests/fault_job" ] || { echo "build first (cmake --build $build)" >&2; exit 2; }
declare -A pass fail
passed_runs=0
start=$(date +%s)
for ((i = 1; i <= runs; i++)); do
    log=$(mktemp)
    (cd "$build" && ctest -L fault --output-on-failure --timeout 240 >"$log" 2>&1)
    ok=1
    while read -r name result; do
        if [ "$result" = Passed ]; then
            pass[$name]=$((${pass[$name]:-0} + 1))
        else
            fail[$name]=$((${fail[$name]:-0} + 1))
            ok=0
        fi
    done < <(grep -E "Test +#[0-9]+: fault_" "$log" | sed -E 's/.*: (fault_[a-z_]+) .*(Passed|Failed|Timeout).*/\1 \2/')
    if [ $ok = 1 ]; then
        passed_runs=$((passed_runs + 1))
        echo "run $i: passed"
    else
        echo "run $i: FAILED"
        grep -E "^FAIL|\*\*\*" "$log" | head -n 5
    fi
    rm -f "$log"
done
echo
printf "%-28s %6s %6s\n" scenario passed failed
for name in $(printf "%s\n" "${!pass[@]}" "${!fail[@]}" | sort -u); do
    printf "%-28s %6d %6d\n" "$name" "${pass[$name]:-0}" "${fail[$name]:-0}"
done
echo "$passed_runs of $runs runs passed completely in $(($(date +%s) - start)) s"
