#!/bin/bash
# Launch time: wall time of msrun starting NP local workers that call
# msr_init, one barrier and msr_finalize, against mpirun -np NP of an MPI
# program doing MPI_Init, MPI_Barrier, MPI_Finalize. Runs alternate, so both
# see the same machine; prints the median and the best of RUNS each.
#   scripts/bench-launch.sh [NP] [RUNS] [NODES]      (defaults 4, 15, 1)
# With NODES > 1, msrun runs as NODES msrun processes on this host (one per
# "node", NP/NODES workers each, joined on a loopback coordinator), started
# together; mpirun still launches all NP ranks from one mpirun (this host has
# no second machine or ssh to give it).
set -euo pipefail
cd "$(dirname "$0")/.."
np=${1:-4}
runs=${2:-15}
nodes=${3:-1}
[ $((np % nodes)) = 0 ] || { echo "NP must be a multiple of NODES" >&2; exit 2; }
b=build/bin
[ -x $b/msrun ] && [ -x $b/msr_barrier ] || { echo "build first: cmake -B build && cmake --build build" >&2; exit 2; }
have_mpi=0
[ -x $b/mpi_barrier ] && command -v mpirun >/dev/null && have_mpi=1
[ $have_mpi = 1 ] || echo "(mpirun or mpi_barrier missing: msrun only)" >&2

tmp=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$tmp"; }' EXIT
# the job token every msrun of a multi-node job shares (there is no default;
# a standalone job makes its own)
if [ "$nodes" -gt 1 ]; then
    (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$tmp/token")
    export MSRUN_TOKEN_FILE=$tmp/token
fi
timeit() { # prints seconds
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; echo "failed: $*" >&2; exit 1; }
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}
msrun_nodes() { # one msrun per node on port $1, all at once; fails if any fails
    local port=$1 pids=() n rc=0
    for ((n = 0; n < nodes; n++)); do
        $b/msrun --master_addr=127.0.0.1 --master_port="$port" --worker_num="$np" \
            --local_worker_num=$((np / nodes)) --log_level=warn $b/msr_barrier &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    return $rc
}
for ((i = 0; i < runs; i++)); do
    if [ "$nodes" = 1 ]; then
        timeit $b/msrun --worker_num="$np" --local_worker_num="$np" --log_level=warn $b/msr_barrier >>"$tmp/msrun"
    else
        # the free port is picked outside the timed part
        port=$(python3 "$(dirname "$0")/free_port.py")
        timeit msrun_nodes "$port" >>"$tmp/msrun"
    fi
    if [ $have_mpi = 1 ]; then
        timeit mpirun --allow-run-as-root --oversubscribe -np "$np" $b/mpi_barrier >>"$tmp/mpirun"
    fi
done
stats() { sort -g "$1" | awk '{a[NR]=$1} END {printf "%.3f %.3f\n", a[int((NR+1)/2)], a[1]}'; }
read -r m_med m_min < <(stats "$tmp/msrun")
printf "launch np=%d nodes=%d runs=%d (init + barrier + finalize, wall seconds)\n" "$np" "$nodes" "$runs"
printf "%-8s %10s %10s\n" launcher median best
printf "%-8s %10s %10s\n" msrun "$m_med" "$m_min"
if [ $have_mpi = 1 ]; then
    read -r p_med p_min < <(stats "$tmp/mpirun")
    printf "%-8s %10s %10s\n" mpirun "$p_med" "$p_min"
    printf "msrun/mpirun median ratio: %.2f\n" "$(echo "$m_med / $p_med" | bc -l)"
fi
