#!/usr/bin/env bash
# Nothing else slower: two commits built alike and measured side by side.
#   (a) the communicator's bus bandwidth at large sizes: allreduce, allgather
#       and broadcast of 1-64 MiB on 2 and 4 ranks (scripts/bench-comm.sh);
#   (b) train_gpt's tokens/s on the default model, 1 and 2 ranks under msrun
#       (the run of bench/train/dp_bench.sh, a fixed number of steps);
#   (c) recovery: kill -9 of a worker until the next generation runs, and of
#       an agent until the job has re-formed (scripts/bench-recovery.sh).
# Each commit is built from `git archive` in a directory of its own (CMake
# with the same options for both; ccache shares the unchanged files between
# them). The measuring scripts are this tree's, for both builds, so only the
# code under test differs. Every build and run is pinned to the same CPUs;
# the rounds alternate which commit goes first, so a drift in the machine's
# load falls on both. The table gives, per figure, each side's median and
# range, the ratio after/before of the medians and of each round, and a flag
# when a figure moved beyond the noise measured in the same run: by more than
# the spread of a commit's own runs, or the same way in every round (see
# bench/regress/table.awk).
#
# usage: bench/regress/regress.sh BEFORE AFTER [RUNS]
#   BEFORE, AFTER: commits (names git rev-parse accepts); RUNS: rounds (3)
# Environment:
#   CPUS      CPU list for taskset, every build and run (default: the CPUs
#             this shell may use)
#   ONLY      comm, train or recovery: measure that part only (a bisect)
#   STEPS     train_gpt steps per run (12); REC_RUNS: bench-recovery.sh runs
#             per round, its median is the round's figure (3)
#   SIZES     comm sizes in bytes (1, 4, 16, 64 MiB)
#   CMAKE_ARGS  configure options for both (RelWithDebInfo, CUDA off)
#   REGRESS_DIR  where the sources and builds go, kept, and a build of the
#             same commit and options reused (default: a temporary
#             directory, removed at the end unless KEEP=1)
#   RAW=1     also prints every sample (FIGURE|DIR|UNIT SIDE VALUE ROUND)
# Exit status: 0 with the table printed; 2 on bad usage or a bad commit name;
# 1 when a build fails (the log's tail is printed).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
me=regress.sh
usage() {
    echo "usage: bench/regress/regress.sh BEFORE AFTER [RUNS]" >&2
    exit 2
}
[ $# -ge 2 ] && [ $# -le 3 ] || usage
runs=${3:-3}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "$me: RUNS must be a positive number, not '$runs'" >&2; exit 2; }
declare -A sha name
name[before]=$1
name[after]=$2
for side in before after; do
    sha[$side]=$(git -C "$here" rev-parse --verify --quiet "${name[$side]}^{commit}") ||
        { echo "$me: ${side^^} '${name[$side]}' is not a commit here" >&2; exit 2; }
done
only=${ONLY:-all}
case $only in all | comm | train | recovery) ;; *) echo "$me: ONLY must be comm, train or recovery" >&2; exit 2 ;; esac
cpus=${CPUS:-$(taskset -pc $$ | sed 's/.*: //')}
taskset -c "$cpus" true 2>/dev/null || { echo "$me: CPUS '$cpus' is not a CPU list taskset accepts" >&2; exit 2; }
pin=(taskset -c "$cpus")
steps=${STEPS:-12}
rec_runs=${REC_RUNS:-3}
sizes=${SIZES:-1048576,4194304,16777216,67108864}
cmake_args=${CMAKE_ARGS:--DCMAKE_BUILD_TYPE=RelWithDebInfo -DMSRUN_CUDA=OFF}
if command -v ccache >/dev/null; then
    cmake_args="$cmake_args -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
fi
if [ -n "${REGRESS_DIR:-}" ]; then
    mkdir -p "$REGRESS_DIR"
    work=$(cd "$REGRESS_DIR" && pwd)
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/msrun-regress.XXXXXX")
    [ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
fi
# both trees at the same depth below one base: ccache sees the same relative
# paths for a file the two commits share
export CCACHE_BASEDIR=$work CCACHE_NOHASHDIR=1

# build SIDE: the commit's tree in $work/SIDE/src, built in $work/SIDE/build
build() {
    local side=$1 d=$work/$1
    # a kept REGRESS_DIR's build of the same commit and options is reused
    if [ "$(cat "$d/built" 2>/dev/null)" = "${sha[$side]} $cmake_args" ] && [ -x "$d/build/bin/msrun" ]; then
        echo "# reusing the build of ${side} ${name[$side]} (${sha[$side]:0:10}) in $d/build" >&2
        return
    fi
    rm -rf "$d" && mkdir -p "$d/src"
    git -C "$here" archive "${sha[$side]}" | tar -x -C "$d/src" ||
        { echo "$me: cannot unpack ${side^^} ${name[$side]} into $d/src" >&2; exit 1; }
    echo "# building ${side} ${name[$side]} (${sha[$side]:0:10}) in $d/build" >&2
    # shellcheck disable=SC2086
    if ! { "${pin[@]}" cmake -S "$d/src" -B "$d/build" $cmake_args &&
        "${pin[@]}" cmake --build "$d/build" -j "$("${pin[@]}" nproc)" \
            --target msrun_cli comm_bench train_gpt fault_job; } >"$d/build.log" 2>&1 ||
        ! [ -x "$d/build/bin/msrun" ] || ! [ -x "$d/build/bin/comm_bench" ] ||
        ! [ -x "$d/build/bin/train_gpt" ] || ! [ -x "$d/build/tests/fault_job" ]; then
        echo "$me: building ${side^^} ${name[$side]} (${sha[$side]:0:10}) failed; the end of $d/build.log:" >&2
        tail -n 20 "$d/build.log" >&2
        [ "${KEEP:-0}" = 1 ] || [ -n "${REGRESS_DIR:-}" ] || echo "$me: (KEEP=1 keeps the tree and the whole log)" >&2
        exit 1
    fi
    echo "${sha[$side]} $cmake_args" >"$d/built"
}

# put KEY DIR UNIT SIDE VALUE: one sample of round $r; DIR is + when more
# is better
put() {
    if [[ $5 =~ ^[0-9.]+$ ]]; then
        echo "$1|$2|$3 $4 $5 $r" >>"$work/samples"
    else
        echo "$me: no figure for $1 ($4): '$5'" >&2
    fi
}

# comm SIDE: bus bandwidth of each op, size and rank count (one bench-comm.sh
# round; the alternation is ours)
comm() {
    local side=$1 np op
    for np in 2 4; do
        for op in allreduce allgather broadcast; do
            ROUNDS=1 MPI=0 MSRUN_BUILD=$work/$side/build timeout 600 "${pin[@]}" bash "$here/scripts/bench-comm.sh" \
                "$np" --op "$op" --sizes "$sizes" >"$work/comm.out" 2>"$work/comm.err" ||
                { echo "$me: bench-comm.sh $np --op $op ($side) failed:" >&2; tail -n 5 "$work/comm.err" >&2; continue; }
            awk '$1 ~ /^[a-z_]+$/ && $2 ~ /^[0-9]+$/ { print $1, $2, $3, $7 }' "$work/comm.out" |
                while read -r o n b bw; do
                    put "$(printf '%s np=%s %3d MiB' "$o" "$n" $((b >> 20)))" + GB/s "$side" "$bw"
                done
        done
    done
}

# train SIDE: tokens/s of train_gpt (the default model, spelled out so a
# change of defaults cannot skew it; one OpenBLAS thread per rank)
train() {
    local side=$1 np bin=$work/$1/build/bin
    for np in 1 2; do
        timeout 600 "${pin[@]}" "$bin/msrun" --worker_num="$np" --local_worker_num="$np" --log_level=warn \
            "$bin/train_gpt" --layers 4 --channels 128 --heads 4 --seq 64 --micro-batch 8 \
            --steps "$steps" --threads 1 >/dev/null 2>"$work/train.err" ||
            { echo "$me: train_gpt on $np ranks ($side) failed:" >&2; tail -n 5 "$work/train.err" >&2; continue; }
        put "train_gpt dp $np tok/s" + tok/s "$side" \
            "$(sed -n 's/.*after the first: .* ms\/step, \([0-9]*\) tok\/s/\1/p' "$work/train.err" | head -n 1)"
    done
}

# recovery SIDE: bench-recovery.sh's medians of REC_RUNS runs
recovery() {
    local side=$1
    timeout 900 "${pin[@]}" bash "$here/scripts/bench-recovery.sh" "$rec_runs" "$work/$side/build" >"$work/rec.out" 2>&1 ||
        { echo "$me: bench-recovery.sh ($side) failed:" >&2; tail -n 5 "$work/rec.out" >&2; return 0; }
    put "recovery: worker kill -9" - s "$side" "$(awk '/^worker kill/ && NF == 9 { print $7 }' "$work/rec.out")"
    put "recovery: agent kill -9" - s "$side" "$(awk '/^agent kill/ && NF == 9 { print $7 }' "$work/rec.out")"
}

measure() {
    [[ $only == all || $only == comm ]] && comm "$1"
    [[ $only == all || $only == train ]] && train "$1"
    [[ $only == all || $only == recovery ]] && recovery "$1"
    return 0
}

build before
build after
: >"$work/samples"
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
for ((r = 1; r <= runs; r++)); do
    order="before after"
    [ $((r % 2)) = 0 ] && order="after before"
    for side in $order; do
        echo "# round $r/$runs: $side" >&2
        measure "$side"
    done
done
echo "# regress.sh ${name[before]} (${sha[before]:0:10}) -> ${name[after]} (${sha[after]:0:10})," \
    "$runs alternating rounds, CPUs $cpus, $(($(date +%s) - t0)) s;" \
    "load average $load0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
[ "${RAW:-0}" = 1 ] && cat "$work/samples"
awk -f "$here/bench/regress/table.awk" "$work/samples"
