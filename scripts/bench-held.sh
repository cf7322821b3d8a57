#!/bin/bash
# Issue 38's reproduction as a measurement: N concurrent Fetch calls that
# wait (INDICES one-byte indices each, the longest wait) from one client
# against a standalone coordinator of each build folder given, in turn.
# Prints the coordinator's resident memory before, while the calls are held
# (or refused) and after they are cancelled. It checks nothing: a build
# without the bound on held calls holds them all.
#   scripts/bench-held.sh [N] [INDICES] [BUILD ...]   (defaults 1000, 60000, build)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
nidx=${2:-60000}
shift $(($# < 2 ? $# : 2))
builds=("$@")
[ ${#builds[@]} -gt 0 ] || builds=(build)
flood=${FLOOD:-${builds[-1]}/tests/held_flood}
[ -x "$flood" ] || { echo "$flood: build the held_flood test client first" >&2; exit 2; }
tmp=$(mktemp -d)
coord=
cleanup() {
    [ -n "$coord" ] && kill "$coord" 2>/dev/null && wait "$coord" 2>/dev/null
    rm -rf "$tmp"
}
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { cleanup; }' EXIT
for b in "${builds[@]}"; do
    "$b/bin/msrun" coordinator --bind 127.0.0.1:0 --ready_fd 3 --job_id held --token s \
        --worker_num 2 --local_worker_num 2 --log_level error 3>"$tmp/ready" 2>"$tmp/err" &
    coord=$!
    for _ in $(seq 100); do
        grep -q '^port' "$tmp/ready" 2>/dev/null && break
        kill -0 "$coord" 2>/dev/null || { cat "$tmp/err" >&2; exit 1; }
        sleep 0.1
    done
    port=$(awk '/^port/ { print $2 }' "$tmp/ready")
    echo "== $b"
    HELD_FLOOD_MEASURE_ONLY=1 "$flood" "127.0.0.1:$port" s "$coord" "$n" "$nidx" $((64 << 20))
    kill "$coord"
    wait "$coord" 2>/dev/null || :
    coord=
done
