#!/usr/bin/env bash
# Allreduce across an emulated cluster network on one host: N msrun agents
# ("nodes") of RANKS_PER_NODE ranks, each agent in its own network and UTS
# namespace (hostname nodeI), joined by veth pairs to a bridge whose links
# a token bucket (tbf) limits to RATE in both directions
# (bench/comm/netns_lib.sh). For each node count it measures the link (a
# TCP ping-pong and stream between two nodes: bench/comm/netns_link.py),
# then runs build/bin/comm_bench --op OP (allreduce) under each algorithm of
# ALGOS (forced with MSR_COMM_ALGO_<OP>), one job per algorithm and
# size, the algorithms alternating within each round (the machine is shared
# and noisy: medians of ROUNDS). Per size and algorithm it prints the time,
# the share of the link's bound reached (bound = 2(N-1)/N x size / RATE for
# allreduce, (N-1)/N x size / RATE for reduce_scatter and allgather,
# size / RATE for broadcast and reduce: the least time the operation needs
# to move its bytes through each node's link), the speed-up over the flat
# ring (over the flat chain for broadcast and reduce), and the bytes each
# node's link sent per operation (read from its counters, TCP headers
# included) beside the bandwidth-optimal share. Goal for the hierarchical
# allreduce: at 16-64 MiB, 80% of the bound and at least 2x the ring.
#
# Usage: bench/comm/netns_bench.sh [-h|--help]
# Environment:
#   NODES           node counts to run (default "2 4")
#   RANKS_PER_NODE  ranks per node (2)
#   RATE            each link's rate in tc syntax (10gbit; e.g. 2gbit)
#   ALGOS           algorithms, in the order of the columns ("ring hier auto",
#                   for broadcast and reduce "chain hier auto"; an
#                   algorithm msrun does not know runs as auto and is
#                   marked so)
#   OP              allreduce, reduce_scatter, allgather, broadcast or
#                   reduce (allreduce; the root of the last two is rank 0)
#   SIZES           sizes in bytes of the whole vector (of all blocks:
#                   reduce_scatter's input, allgather's output)
#                   ("1048576 4194304 16777216 67108864")
#   ROUNDS          rounds (3)
#   ITERS           timed calls per job (comm_bench's default by size)
#   JOB_LIMIT       seconds one job may run (300)
#   MSRUN_BUILD     the build directory (build)
#   RAW=1           also print every job's result line
#
# All "nodes" share this host's cores, so every rank takes the waiting policy
# of a host with more ranks than cores but at most two a core
# (MSR_COMM_SPIN_US=0, MSR_COMM_YIELD_US=1000, MSR_COMM_SHM_YIELD_US=5000;
# set them to override), which msrun would only choose by itself if the
# nodes shared a hostname.
#
# Needs root, ip, tc (with tbf), veth and unshare: without them it prints
# why and exits 0 (skipped). The namespaces, links and every process in them
# are removed on exit, on failure and on Ctrl-C; a set left by an earlier run
# that was killed is removed at start.
set -uo pipefail
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
    sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
fi
[ $# -eq 0 ] || { echo "netns_bench.sh: no arguments (settings come from the environment; see --help)" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${MSRUN_BUILD:-$root/build}
[ -d "$build" ] || { echo "netns_bench.sh: no build directory '$build'" >&2; exit 2; }
build=$(cd "$build" && pwd)
msrun=$build/bin/msrun
bench=$build/bin/comm_bench
[ -x "$msrun" ] && [ -x "$bench" ] || {
    echo "netns_bench.sh: build first (cmake -B build && cmake --build build)" >&2
    exit 2
}
nodes_list=${NODES:-2 4}
ppn=${RANKS_PER_NODE:-2}
rate=${RATE:-10gbit}
op=${OP:-allreduce}
case $op in
allreduce | reduce_scatter | allgather) base=ring ;;
broadcast | reduce) base=chain ;;
*) echo "netns_bench.sh: OP must be allreduce, reduce_scatter, allgather, broadcast or reduce, not '$op'" >&2; exit 2 ;;
esac
read -ra algos <<<"${ALGOS:-$base hier auto}"
read -ra sizes <<<"${SIZES:-1048576 4194304 16777216 67108864}"
rounds=${ROUNDS:-3}
algo_var=MSR_COMM_ALGO_$(echo "$op" | tr a-z A-Z)
iters=${ITERS:-}
limit=${JOB_LIMIT:-300}
# shellcheck disable=SC2086 # NODES is a list
for v in "$ppn" "$rounds" "$limit" $nodes_list "${sizes[@]}" "${iters:-1}"; do
    case $v in '' | *[!0-9]* | 0) echo "netns_bench.sh: '$v' is not a positive number" >&2; exit 2 ;; esac
done
[ ${#algos[@]} -gt 0 ] || { echo "netns_bench.sh: ALGOS is empty" >&2; exit 2; }
for v in $nodes_list; do
    [ "$v" -ge 2 ] || { echo "netns_bench.sh: NODES must be at least 2, not $v" >&2; exit 2; }
done

. "$here/netns_lib.sh"
bps=$(netns_rate_bps "$rate") || { echo "netns_bench.sh: bad RATE '$rate' (e.g. 10gbit, 500mbit)" >&2; exit 2; }
if ! why=$(netns_usable); then
    echo "netns_bench.sh: SKIP: $why"
    exit 0
fi
tmp=$(mktemp -d)
cleanup() {
    netns_down
    rm -rf "$tmp"
}
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { cleanup; }' EXIT
trap 'echo "netns_bench.sh: interrupted" >&2; exit 130' INT TERM
netns_remove_stale
(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$tmp/token")

wait_env=(MSR_COMM_SPIN_US="${MSR_COMM_SPIN_US:-0}" MSR_COMM_YIELD_US="${MSR_COMM_YIELD_US:-1000}"
    MSR_COMM_SHM_YIELD_US="${MSR_COMM_SHM_YIELD_US:-5000}")

# run_job N ALGO SIZE LOG [VAR=VALUE...]: one job of OP over the N nodes;
# appends "algo=A nodes=N ... out_max=B in_max=B" to $tmp/results. Returns
# non-zero (with the job's output in LOG) when the job fails.
run_job() {
    local n=$1 algo=$2 size=$3 log=$4 i pids=() end ok=1
    shift 4
    local tx0=() rx0=()
    for ((i = 0; i < n; i++)); do
        tx0[$i]=$(netns_bytes $i tx)
        rx0[$i]=$(netns_bytes $i rx)
    done
    for ((i = n - 1; i >= 0; i--)); do
        netns_exec $i env MSRUN_TOKEN_FILE="$tmp/token" "$algo_var=$algo" \
            "${wait_env[@]}" "$@" \
            "$msrun" --worker_num=$((n * ppn)) --local_worker_num="$ppn" --job_id="netnsb-$$" \
            --master_addr="$(netns_addr 0)" --master_port=29500 --node_rank=$i \
            --grace_period=10 --log_level=warn \
            "$bench" --op "$op" --sizes "$size" ${iters:+--iters "$iters"} \
            >"$log.node$i" 2>&1 &
        pids+=($!)
    done
    end=$((SECONDS + limit))
    local p
    for p in "${pids[@]}"; do
        while kill -0 "$p" 2>/dev/null; do
            if [ $SECONDS -ge $end ]; then
                echo "netns_bench.sh: job still running after $limit s (JOB_LIMIT): stopping it" >>"$log.node0"
                for ((i = 0; i < n; i++)); do netns_kill "${NS_PREFIX}-n$i"; done
                ok=0
                break
            fi
            sleep 0.2
        done
        wait "$p" || ok=0
    done
    cat "$log".node* >"$log"
    [ $ok = 1 ] || return 1
    local line calls out_max=0 in_max=0 d
    line=$(grep -o "op=$op .*" "$log.node0" | tail -1)
    calls=$(echo "$line" | sed -n 's/.* calls=\([0-9]*\).*/\1/p')
    [ -n "$calls" ] || return 1
    for ((i = 0; i < n; i++)); do
        d=$(($(netns_bytes $i tx) - tx0[i]))
        [ $d -gt $out_max ] && out_max=$d
        d=$(($(netns_bytes $i rx) - rx0[i]))
        [ $d -gt $in_max ] && in_max=$d
    done
    local unknown=0
    grep -q "$algo_var=$algo is not an algorithm" "$log" && unknown=1
    echo "algo=$algo nodes=$n $line out_per_op=$((out_max / calls)) in_per_op=$((in_max / calls)) unknown=$unknown" >>"$tmp/results"
    [ "${RAW:-0}" = 1 ] && tail -1 "$tmp/results"
    return 0
}

echo "emulated cluster: $ppn ranks per node, links of $rate (tbf, both directions), algorithms: ${algos[*]}"
if netns_has_qdisc netem; then
    echo "note: netem exists here, but no delay is added (the link's latency is the veth's own)"
else
    echo "note: no netem qdisc in this kernel: no delay can be added; the link's latency is the veth's own"
fi
for n in $nodes_list; do
    netns_remove "$NS_PREFIX"
    netns_up "$n" "$rate" || { echo "netns_bench.sh: cannot build the emulated network" >&2; exit 1; }
    # the link, measured between node 1 (server) and node 0
    netns_exec 1 python3 "$here/netns_link.py" serve 5001 >"$tmp/link.serve" 2>&1 &
    link=$(netns_exec 0 python3 "$here/netns_link.py" probe "$(netns_addr 1)" 5001 256 2>&1)
    wait $! 2>/dev/null
    echo
    echo "== $n nodes x $ppn ranks: link node0->node1: $link (rate $rate)"
    # which UCX transports carry what (one job with UCX's info log)
    if run_job "$n" auto "${sizes[0]}" "$tmp/probe" UCX_LOG_LEVEL=info; then
        echo "UCX endpoints (rank 0): $(grep -h '^\[node 0 rank 0\].*ep_cfg' "$tmp/probe" |
            sed 's/.*ep_cfg\[[0-9]*\]: //' | sort | uniq -c | sed 's/^ *//' | paste -sd';' -)"
    else
        echo "netns_bench.sh: the probe job failed:" >&2
        cat "$tmp/probe" >&2
        exit 1
    fi
    : >"$tmp/results"
    for ((r = 0; r < rounds; r++)); do
        for s in "${sizes[@]}"; do
            for ((k = 0; k < ${#algos[@]}; k++)); do
                a=${algos[$(((k + r) % ${#algos[@]}))]}
                run_job "$n" "$a" "$s" "$tmp/job" || {
                    echo "netns_bench.sh: $a at $s bytes on $n nodes failed:" >&2
                    cat "$tmp/job" >&2
                    exit 1
                }
            done
        done
    done
    awk -v op="$op" -v base="$base" -v nodes="$n" -v ppn="$ppn" -v bps="$bps" -v rounds="$rounds" -v algos="${algos[*]}" -v sizes="${sizes[*]}" '
    function median(list,    k, v, i, j, t) {
        k = split(list, v, " ")
        for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
        return k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
    }
    {
        for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
        key = f["algo"] SUBSEP f["bytes"]
        lat[key] = lat[key] " " f["lat_us"]
        out[key] = out[key] " " f["out_per_op"]
        inb[key] = inb[key] " " f["in_per_op"]
        if (f["unknown"] == 1) unknown[f["algo"]] = 1
    }
    END {
        na = split(algos, al, " "); ns = split(sizes, sz, " ")
        opt_f = base == "chain" ? 1 : (op == "allreduce" ? 2 : 1) * (nodes - 1) / nodes
        printf "%s, %d nodes x %s ranks, median of %d rounds; bound = %s x size / rate\n", op, nodes, ppn, rounds,
            (base == "chain" ? "1" : op == "allreduce" ? "2(N-1)/N" : "(N-1)/N")
        printf "%8s %-6s %10s %8s %8s %12s %12s %12s\n", "MiB", "algo", "time_ms", "%bound", "x_" base, "out_MiB/op", "in_MiB/op", "optimal_MiB"
        for (k = 1; k <= ns; k++) {
            s = sz[k]; bound_ms = opt_f * s * 8 / bps * 1e3
            ring = (base SUBSEP s) in lat ? median(lat[base SUBSEP s]) : 0
            printf "%8.1f %-6s %10.2f %8s %8s %12s %12s %12.2f\n", s / 1048576, "bound", bound_ms, "100", "", "", "", opt_f * s / 1048576
            for (a = 1; a <= na; a++) {
                key = al[a] SUBSEP s
                if (!(key in lat)) continue
                t = median(lat[key]) / 1e3
                name = al[a] (al[a] in unknown ? "*" : "")
                pct = t > 0 ? 100 * bound_ms / t : 0
                printf "%8.1f %-6s %10.2f %8.1f %8s %12.2f %12.2f %12.2f\n", s / 1048576, name, t, pct,
                    (ring > 0 && t > 0 ? sprintf("%.2f", ring / 1e3 / t) : "-"),
                    median(out[key]) / 1048576, median(inb[key]) / 1048576, opt_f * s / 1048576
                if (op == "allreduce" && al[a] == "hier" && !(al[a] in unknown) && s >= 16777216 && s <= 67108864)
                    goal = goal sprintf("  %s MiB: %.0f%% of the bound (goal 80), %.2fx the ring (goal 2): %s\n",
                        s / 1048576, pct, (ring > 0 ? ring / 1e3 / t : 0),
                        (pct >= 80 && ring / 1e3 >= 2 * t ? "met" : "MISSED"))
            }
        }
        for (a = 1; a <= na; a++)
            if (al[a] in unknown) printf "* %s: msrun does not know this algorithm (it warned and ran auto)\n", al[a]
        if (goal != "") printf "hierarchical goals:\n%s", goal
        else if (op == "allreduce" && "hier" in unknown) print "hierarchical goals (16-64 MiB: 80% of the bound, 2x the ring): not judged, hier ran as auto"
    }' "$tmp/results"
done
