#!/bin/bash
# Launch time side by side: msrun against mpirun, pinned the same way, in
# alternating runs, for two jobs of NP ranks on this host:
#   true     msrun --worker_num=NP true       / mpirun -np NP true
#   barrier  msr_barrier (msr_init, one barrier, msr_finalize)
#            / mpi_barrier (MPI_Init, MPI_Barrier, MPI_Finalize)
# Prints the median and best wall time of RUNS each, the ratio of the
# medians, then the launch timeline of one msrun run of each job
# (msrun --profile_launch), each row the median over RUNS more runs.
#   bench/launch/launch_bench.sh [NP] [RUNS] [CPUS]   (defaults 4, 7, all)
# CPUS: a taskset list both launchers and all their processes run on
# (e.g. 0 or 0-1); MSRUN_BUILD: the build directory (default build);
# MSRUN_BASE: another msrun executable (say, the commit before a change),
# run alternately with the build's under the same load, its rows added.
set -euo pipefail
cd "$(dirname "$0")/../.."
np=${1:-4}
runs=${2:-7}
cpus=${3:-}
b=${MSRUN_BUILD:-build}/bin
[ -x "$b/msrun" ] && [ -x "$b/msr_barrier" ] ||
    { echo "build first: cmake -B build && cmake --build build" >&2; exit 2; }
have_mpi=0
[ -x "$b/mpi_barrier" ] && command -v mpirun >/dev/null && have_mpi=1
[ $have_mpi = 1 ] || echo "(mpirun or mpi_barrier missing: msrun only)" >&2
pin=()
[ -n "$cpus" ] && pin=(taskset -c "$cpus")

tmp=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$tmp"; }' EXIT
mpirun_=(mpirun --oversubscribe -np "$np")
[ "$(id -u)" = 0 ] && mpirun_=(mpirun --allow-run-as-root --oversubscribe -np "$np")
msrun_=("$b/msrun" --worker_num="$np" --local_worker_num="$np" --log_level=warn)
base=${MSRUN_BASE:-}
[ -z "$base" ] || [ -x "$base" ] || { echo "MSRUN_BASE: no executable $base" >&2; exit 2; }
base_=("$base" --worker_num="$np" --local_worker_num="$np" --log_level=warn)

timeit() { # FILE CMD...: appends the wall seconds of CMD to FILE
    local out=$1 t0 t1
    shift
    t0=$(date +%s%N)
    "${pin[@]}" "$@" >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; echo "failed: $*" >&2; exit 1; }
    t1=$(date +%s%N)
    echo "$(((t1 - t0) / 1000))" >>"$out"
}
for ((i = 0; i < runs; i++)); do
    timeit "$tmp/msrun.true" "${msrun_[@]}" true
    [ -z "$base" ] || timeit "$tmp/base.true" "${base_[@]}" true
    [ $have_mpi = 0 ] || timeit "$tmp/mpirun.true" "${mpirun_[@]}" true
    timeit "$tmp/msrun.barrier" "${msrun_[@]}" "$b/msr_barrier"
    [ -z "$base" ] || timeit "$tmp/base.barrier" "${base_[@]}" "$b/msr_barrier"
    [ $have_mpi = 0 ] || timeit "$tmp/mpirun.barrier" "${mpirun_[@]}" "$b/mpi_barrier"
done
stats() { sort -n "$1" | awk '{a[NR]=$1} END {printf "%.1f %.1f", a[int((NR+1)/2)]/1000, a[1]/1000}'; echo; }
printf "launch: np=%d, %d alternating runs, cpus %s (wall ms)\n" "$np" "$runs" "${cpus:-all}"
printf "%-8s %10s %8s %10s %8s %8s\n" job "msrun med" best "mpirun med" best ratio
row() { # WHO JOB: WHO's line for JOB (msrun or base) against mpirun's
    local mm mb pm pb
    read -r mm mb < <(stats "$tmp/$1.$2")
    if [ $have_mpi = 1 ]; then
        read -r pm pb < <(stats "$tmp/mpirun.$2")
        printf "%-8s %10s %8s %10s %8s %8.2f\n" "$2" "$mm" "$mb" "$pm" "$pb" \
            "$(echo "$mm / $pm" | bc -l)"
    else
        printf "%-8s %10s %8s %10s %8s %8s\n" "$2" "$mm" "$mb" - - -
    fi
}
for job in true barrier; do row msrun "$job"; done
if [ -n "$base" ]; then
    echo "MSRUN_BASE ($base), the same runs alternating:"
    for job in true barrier; do row base "$job"; done
fi
# The timeline: RUNS more msrun runs of each job with --profile_launch,
# each row's median start and duration over them.
for job in true "$b/msr_barrier"; do
    echo
    echo "timeline, median of $runs runs: msrun --worker_num=$np ${job##*/} (ms)"
    : >"$tmp/rows"
    for ((i = 0; i < runs; i++)); do
        "${pin[@]}" "${msrun_[@]}" --profile_launch "$job" 2>&1 >/dev/null |
            sed -n '/launch timeline/,$p' | sed '1,2d; s/ rank \([0-9]*\) / rank:\1 /' >>"$tmp/rows"
    done
    awk '{ k = $1 " " $2; if (!(k in n)) order[++m] = k; s[k, ++n[k]] = $3; d[k, n[k]] = $4 }
        function med(a, k, c,   i, j, t, v) {
            for (i = 1; i <= c; i++) v[i] = a[k, i]
            for (i = 2; i <= c; i++) for (j = i; j > 1 && v[j] < v[j-1]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
            return v[int((c + 1) / 2)]
        }
        END {
            printf "  %-14s %-10s %10s %10s\n", "phase", "process", "start", "duration"
            for (i = 1; i <= m; i++) {
                k = order[i]; split(k, f, " "); sub(":", " ", f[2])
                printf "  %-14s %-10s %10.1f %10.1f\n", f[1], f[2], med(s, k, n[k]), med(d, k, n[k])
            }
        }' "$tmp/rows"
done
