#!/usr/bin/env bash
# Side-by-side collective benchmark: build/bin/comm_bench under msrun and the
# Open MPI reference (bench/comm/mpi_comm_bench.c) under mpirun, run
# alternately ROUNDS times each in one go (the machine is shared and noisy:
# only figures taken together compare), then per size the median of each and
# the ratios. lat ratio = msrun / Open MPI (below 1: msrun is faster); bw
# ratio = msrun / Open MPI (above 1: msrun moves more).
#
# Usage: scripts/bench-comm.sh NP [comm_bench options, e.g. --op allreduce]
# Environment: ROUNDS (3), MSRUN_BUILD (build), MPIRUN_ARGS (extra mpirun
# options), RAW=1 also prints every raw line, NODES (1): msrun processes on
# loopback, NP/NODES ranks each (a multi-node job on one host: its groups
# share one segment as on one node; MSR_COMM_HOST_SHM=0 makes the nodes
# reach each other as separate machines, through UCX's network path),
# MPI=0 leaves Open MPI out.
#
# ALGOS=1 compares msrun's own algorithms instead (how the thresholds in
# docs/comm.md were measured): the op's algorithms are forced in turn with
# MSR_COMM_ALGO_<OP>, alternating, and the median latency of each is shown.
set -euo pipefail
np=${1:?usage: bench-comm.sh NP [--op NAME] [--sizes LIST]}
shift
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--op allreduce)
here=$(cd "$(dirname "$0")/.." && pwd)
build=${MSRUN_BUILD:-$here/build}
rounds=${ROUNDS:-3}
msrun=$build/bin/msrun
bench=$build/bin/comm_bench
[ -x "$msrun" ] && [ -x "$bench" ] || {
    echo "bench-comm.sh: build first (cmake -B build && cmake --build build)" >&2
    exit 2
}
tmp=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$tmp"; }' EXIT
nodes=${NODES:-1}
[ $((np % nodes)) -eq 0 ] || { echo "bench-comm.sh: NP $np is not a multiple of NODES $nodes" >&2; exit 2; }

# msrun_bench ARGS...: comm_bench under msrun (NODES of them on loopback);
# rank 0's lines on stdout
msrun_bench() {
    if [ "$nodes" -le 1 ]; then
        "$msrun" --worker_num="$np" --local_worker_num="$np" --log_level=warn "$bench" "$@"
        return
    fi
    local port n pids=() rc=0
    port=$(python3 "$(dirname "$0")/free_port.py")
    [ -f "$tmp/token" ] || (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$tmp/token")
    for ((n = nodes - 1; n >= 0; n--)); do
        MSRUN_TOKEN_FILE=$tmp/token "$msrun" --worker_num="$np" --local_worker_num=$((np / nodes)) \
            --nnodes="$nodes" --master_addr=127.0.0.1 --master_port="$port" --node_rank=$n \
            --job_id="bench-comm-$$-$port" --log_level=warn "$bench" "$@" >"$tmp/node$n.out" &
        pids+=($!)
    done
    for n in "${pids[@]}"; do wait "$n" || rc=$?; done
    cat "$tmp/node0.out"
    return $rc
}

if [ "${ALGOS:-0}" = 1 ]; then
    op=allreduce
    for ((i = 0; i < ${#args[@]}; i++)); do
        [ "${args[$i]}" = --op ] && op=${args[$((i + 1))]}
    done
    case $op in
    allreduce) algos="slots tiles direct rd ring" ;;
    reduce_scatter | allgather) algos="tiles direct ring" ;;
    broadcast | reduce) algos="tiles binomial chain" ;;
    *) echo "bench-comm.sh: $op has one algorithm" >&2; exit 2 ;;
    esac
    # over several nodes: no shared memory across them; the two levels
    if [ "$nodes" -gt 1 ]; then
        algos=${algos#slots }
        algos=${algos/tiles/}
        algos="$algos hier"
    fi
    var=MSR_COMM_ALGO_$(echo "$op" | tr a-z A-Z)
    for ((r = 1; r <= rounds; r++)); do
        for a in $algos; do
            # slots: the shared-memory slots, big enough for the sweep's
            # sizes up to 1 MiB (the segment's limit at 8 ranks); tiles: the
            # tiled shared-memory path at every size
            case $a in
            slots) set_env=("$var=shm" MSR_COMM_SHM_MAX=$((1 << 20)) MSR_COMM_SHM_TILE=0) ;;
            tiles) set_env=("$var=shm" MSR_COMM_SHM_MAX=0) ;;
            *) set_env=("$var=$a" MSR_COMM_SHM_MAX=0 MSR_COMM_SHM_TILE=0) ;;
            esac
            # hier: the nodes' own segments keep their defaults
            [ "$a" = hier ] && set_env=("$var=hier")
            (export "${set_env[@]}" && msrun_bench "${args[@]}") 2>"$tmp/err" |
                sed -n "s/^\(\[node [0-9]* rank [0-9]*\] \)\{0,1\}\(op=.*\)/$a \2/p" >>"$tmp/algos.txt" ||
                { cat "$tmp/err" >&2; exit 1; }
        done
    done
    [ "${RAW:-0}" = 1 ] && cat "$tmp/algos.txt"
    awk -v algos="$algos" -v rounds="$rounds" -v op="$op" -v np="$np" '
    function median(list,    n, a, i, j, t) {
        n = split(list, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    {
        for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
        if (!(f["bytes"] in seen)) { seen[f["bytes"]] = 1; sizes[++ns] = f["bytes"] }
        lat[$1, f["bytes"]] = lat[$1, f["bytes"]] " " f["lat_us"]
    }
    END {
        na = split(algos, al, " ")
        printf "%s np=%s: median lat_us of %d alternating runs per algorithm\n%10s", op, np, rounds, "bytes"
        for (a = 1; a <= na; a++) printf " %12s", al[a]
        printf "\n"
        for (k = 1; k <= ns; k++) {
            printf "%10s", sizes[k]
            for (a = 1; a <= na; a++) printf " %12.2f", median(lat[al[a], sizes[k]])
            printf "\n"
        }
    }' "$tmp/algos.txt"
    exit 0
fi

mpi_bench=$build/bin/mpi_comm_bench
if [ ! -x "$mpi_bench" ] && command -v mpicc >/dev/null; then
    mpicc -O2 "$here/bench/comm/mpi_comm_bench.c" -o "$tmp/mpi_comm_bench"
    mpi_bench=$tmp/mpi_comm_bench
fi
have_mpi=0
if [ "${MPI:-1}" = 0 ]; then
    :
elif [ -x "$mpi_bench" ] && command -v mpirun >/dev/null; then
    have_mpi=1
else
    echo "bench-comm.sh: Open MPI not found (openmpi-bin libopenmpi-dev): msrun only" >&2
fi

for ((r = 1; r <= rounds; r++)); do
    msrun_bench "${args[@]}" 2>"$tmp/msrun.err.$r" | sed -n 's/^\(\[node [0-9]* rank [0-9]*\] \)\{0,1\}\(op=.*\)/\2/p' \
        >>"$tmp/msrun.txt" || { cat "$tmp/msrun.err.$r" >&2; exit 1; }
    if [ $have_mpi = 1 ]; then
        # shellcheck disable=SC2086
        mpirun --allow-run-as-root --oversubscribe -np "$np" ${MPIRUN_ARGS:-} "$mpi_bench" \
            "${args[@]}" 2>"$tmp/mpi.err.$r" | grep '^op=' >>"$tmp/mpi.txt" ||
            { cat "$tmp/mpi.err.$r" >&2; exit 1; }
    fi
done
[ "${RAW:-0}" = 1 ] && { sed 's/^/msrun   /' "$tmp/msrun.txt"; [ $have_mpi = 1 ] && sed 's/^/openmpi /' "$tmp/mpi.txt"; }
[ $have_mpi = 1 ] || : >"$tmp/mpi.txt"

awk -v rounds="$rounds" '
function field(line, key,    i, n, kv) {
    n = split(line, kv, " ")
    for (i = 1; i <= n; i++) if (index(kv[i], key "=") == 1) return substr(kv[i], length(key) + 2)
    return ""
}
function median(list,    n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
    side = FILENAME ~ /mpi.txt$/ ? "mpi" : "msr"
    key = field($0, "op") " " field($0, "np") " " field($0, "bytes")
    if (!(key in seen)) { seen[key] = 1; order[++nkeys] = key }
    lat[side, key] = lat[side, key] " " field($0, "lat_us")
    bw[side, key] = bw[side, key] " " field($0, "busbw_GBs")
}
END {
    printf "median of %d alternating runs each; lat ratio = msrun/openmpi, bw ratio = msrun/openmpi\n", rounds
    printf "%-15s %3s %10s %12s %12s %9s %12s %12s %9s\n", "op", "np", "bytes", "msrun_lat_us", "ompi_lat_us", "lat_ratio", "msrun_busbw", "ompi_busbw", "bw_ratio"
    for (k = 1; k <= nkeys; k++) {
        key = order[k]; split(key, p, " ")
        ml = median(lat["msr", key]); mb = median(bw["msr", key])
        have = (("mpi" SUBSEP key) in lat)
        ol = have ? median(lat["mpi", key]) : 0; ob = have ? median(bw["mpi", key]) : 0
        ols = have ? sprintf("%.2f", ol) : "-"; lr = (have && ol > 0) ? sprintf("%.2f", ml / ol) : "-"
        obs = have ? sprintf("%.3f", ob) : "-"; br = (have && ob > 0) ? sprintf("%.2f", mb / ob) : "-"
        printf "%-15s %3s %10s %12.2f %12s %9s %12.3f %12s %9s\n", p[1], p[2], p[3], ml, ols, lr, mb, obs, br
    }
}' "$tmp/msrun.txt" "$tmp/mpi.txt"
