#!/bin/bash
# Two builds side by side on one node: the same single-node figures from
# each, run alternately ROUNDS times in one go (the machine is shared and
# noisy: only figures taken together compare), then the median of each and
# new/old. For checking that a change makes nothing slower inside one node.
#
#   scripts/bench-compare.sh OLD_BUILD NEW_BUILD
#
# Figures: allreduce latency of 2 and 4 local ranks (comm_bench, sizes
# SIZES), the wall time of msrun starting 4 workers that init, barrier and
# finalize (as scripts/bench-launch.sh), and rdzv_scale's total time for
# RDZV_NODES simulated nodes of 8 ranks. Environment: ROUNDS (5), SIZES
# (comm_bench --sizes list, default 4096,65536,1048576,16777216), RDZV_NODES
# (1024; 0 skips it). Each build needs bin/msrun, bin/comm_bench,
# bin/msr_barrier and bin/rdzv_scale.
set -euo pipefail
old=${1:?usage: bench-compare.sh OLD_BUILD NEW_BUILD}
new=${2:?usage: bench-compare.sh OLD_BUILD NEW_BUILD}
rounds=${ROUNDS:-5}
sizes=${SIZES:-4096,65536,1048576,16777216}
rdzv_nodes=${RDZV_NODES:-1024}
for b in "$old" "$new"; do
    for t in msrun comm_bench msr_barrier rdzv_scale; do
        [ -x "$b/bin/$t" ] || { echo "bench-compare.sh: $b/bin/$t is missing: build it" >&2; exit 2; }
    done
done
tmp=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$tmp"; }' EXIT

# one round of every figure from build $1, lines "KEY VALUE" appended to $2
one_round() {
    local b=$1 out=$2 np t0 t1
    for np in 2 4; do
        "$b/bin/msrun" --worker_num=$np --local_worker_num=$np --log_level=warn \
            "$b/bin/comm_bench" --op allreduce --sizes "$sizes" 2>"$tmp/err" |
            sed -n 's/^\(\[node [0-9]* rank [0-9]*\] \)\{0,1\}op=.* bytes=\([0-9]*\) .*lat_us=\([0-9.]*\).*/\2 \3/p' |
            awk -v np=$np '{printf "allreduce_np%d_%sB_us %s\n", np, $1, $2}' >>"$out" ||
            { cat "$tmp/err" >&2; exit 1; }
    done
    t0=$(date +%s.%N)
    "$b/bin/msrun" --worker_num=4 --log_level=warn "$b/bin/msr_barrier" >/dev/null 2>"$tmp/err" ||
        { cat "$tmp/err" >&2; exit 1; }
    t1=$(date +%s.%N)
    echo "launch_np4_ms $(echo "($t1 - $t0) * 1000" | bc -l)" >>"$out"
    if [ "$rdzv_nodes" -gt 0 ]; then
        "$b/bin/rdzv_scale" --nodes "$rdzv_nodes" 2>"$tmp/err" |
            sed -n "s/^nodes=.* total_ms=\([0-9.]*\).*/rdzv_${rdzv_nodes}_nodes_ms \1/p" >>"$out" ||
            { cat "$tmp/err" >&2; exit 1; }
    fi
}

for ((r = 1; r <= rounds; r++)); do
    one_round "$old" "$tmp/old.txt"
    one_round "$new" "$tmp/new.txt"
done
awk -v rounds="$rounds" '
function median(list,    n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
    side = FILENAME ~ /old.txt$/ ? "old" : "new"
    if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 }
    v[side, $1] = v[side, $1] " " $2
}
END {
    printf "median of %d alternating rounds; new/old below 1: the new build is faster\n", rounds
    printf "%-32s %12s %12s %8s\n", "figure", "old", "new", "new/old"
    for (k = 1; k <= n; k++) {
        o = median(v["old", order[k]]); w = median(v["new", order[k]])
        printf "%-32s %12.2f %12.2f %8.2f\n", order[k], o, w, (o > 0 ? w / o : 0)
    }
}' "$tmp/old.txt" "$tmp/new.txt"
