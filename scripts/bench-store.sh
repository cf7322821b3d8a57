#!/bin/bash
# Store latency and throughput: build/bin/store_job under msrun (NP local
# workers, embedded coordinator, the default state file), RUNS runs; with
# several build folders the runs alternate between them, so every build sees
# the same machine. Prints, per build and call kind, the medians over the
# runs of p50/p99 latency and of the job's rate.
#   scripts/bench-store.sh [NP] [RUNS] [BUILD ...]     (defaults 4, 9, build)
#   ITERS=500 BYTES=64 set the calls per rank and the value size.
set -euo pipefail
cd "$(dirname "$0")/.."
np=${1:-4}
runs=${2:-9}
shift $(($# < 2 ? $# : 2))
builds=("$@")
[ ${#builds[@]} -gt 0 ] || builds=(build)
for b in "${builds[@]}"; do
    [ -x "$b/bin/msrun" ] && [ -x "$b/bin/store_job" ] ||
        { echo "$b: build first (msrun and store_job)" >&2; exit 2; }
done
tmp=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$tmp"; }' EXIT
for ((r = 0; r < runs; r++)); do
    for i in "${!builds[@]}"; do
        b=${builds[$i]}
        "$b/bin/msrun" --worker_num="$np" --local_worker_num="$np" --log_level=warn \
            "$b/bin/store_job" --iters "${ITERS:-500}" --bytes "${BYTES:-64}" \
            >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; echo "failed: $b" >&2; exit 1; }
        sed -n 's/.*op=\([a-z]*\) .*p50_us=\([0-9.]*\) p99_us=\([0-9.]*\) ops_s=\([0-9]*\).*/\1 \2 \3 \4/p' \
            "$tmp/out" | while read -r op p50 p99 ops; do
            echo "$p50 $p99 $ops" >>"$tmp/$i.$op"
        done
    done
done
med() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf '%-28s %-4s %10s %10s %10s\n' build op p50_us p99_us ops_s
for i in "${!builds[@]}"; do
    for op in set get add; do
        f=$tmp/$i.$op
        [ -s "$f" ] || continue
        printf '%-28s %-4s %10s %10s %10s\n' "${builds[$i]}" "$op" "$(cut -d' ' -f1 "$f" | med)" \
            "$(cut -d' ' -f2 "$f" | med)" "$(cut -d' ' -f3 "$f" | med)"
    done
done
