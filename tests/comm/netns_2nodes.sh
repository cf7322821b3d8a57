#!/usr/bin/env bash
# Two msrun "nodes" of 2 ranks, each in its own network namespace and
# hostname, joined through a bridge by veth links limited to 2 Gbit/s
# (bench/comm/netns_lib.sh, the harness of bench/comm/netns_bench.sh):
# comm_bench --check runs allreduces whose every element is verified, and
# each node's link must have carried, both ways, at least what any
# allreduce between 2 nodes has to move: the whole vector per call
# (2(N-1)/N x size with N = 2). A job whose traffic between the nodes
# took shared memory or CMA instead fails. Skips (exit 77) without root,
# ip, tc, veth or tbf. Everything it started goes away on exit, failure
# and signals.
set -u
build=${MSRUN_BUILD:?MSRUN_BUILD is not set}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../netns_test.sh"
bench=$build/bin/comm_bench

failed() {
    echo "FAIL: $*"
    echo "---- output ----"
    cat "$out"/node* 2>/dev/null
    exit 1
}

netns_skip_unusable
netns_remove_stale
netns_up 2 2gbit || failed "cannot build the emulated network"

(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$out/token")
sizes=(1048576 8388608)
iters=2
env_run=(env MSRUN_TOKEN_FILE="$out/token")
prog=("$bench")
if [ -n "${MSRUN_SANITIZE:-}" ]; then
    # as tests/comm/run.sh: UCX must not hook malloc/mmap under ASan; leaks
    # are checked in the workers, msrun runs without that check
    env_run+=(UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_EVENTS=no
        ASAN_OPTIONS=detect_leaks=0)
    prog=(env "ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}" "$bench")
fi
declare -A before
for n in 0 1; do before[$n]=$(netns_bytes "$n" tx)/$(netns_bytes "$n" rx); done
pids=()
for n in 1 0; do
    netns_exec "$n" "${env_run[@]}" "$msrun" --worker_num=4 --local_worker_num=2 \
        --job_id=netns2-$$ --master_addr="$(netns_addr 0)" --master_port=29500 --node_rank=$n \
        --grace_period=10 --log_level=warn \
        "${prog[@]}" --op allreduce --sizes "$(IFS=,; echo "${sizes[*]}")" --iters $iters --check \
        >"$out/node$n" 2>&1 &
    pids+=($!)
done
end=$((SECONDS + 60))
for p in "${pids[@]}"; do
    while kill -0 "$p" 2>/dev/null; do
        [ $SECONDS -ge $end ] && failed "the job still runs after 60 s"
        sleep 0.1
    done
    wait "$p" || failed "an msrun exited with $?"
done
for s in "${sizes[@]}"; do
    grep -q "check op=allreduce bytes=$s ok" "$out/node0" || failed "no verified allreduce of $s bytes"
done

# Every allreduce call moves at least the whole vector out of and into each
# node (N = 2: 2(N-1)/N x size each way). comm_bench makes at least 4
# warm-up calls, the timed ones and the checked one per size.
want=0
for s in "${sizes[@]}"; do want=$((want + (4 + iters + 1) * s)); done
for n in 0 1; do
    for dir in tx rx; do
        b=${before[$n]}
        [ $dir = tx ] && b=${b%/*} || b=${b#*/}
        got=$(($(netns_bytes "$n" $dir) - b))
        echo "node $n link $dir: $got bytes (at least $want expected)"
        [ "$got" -ge "$want" ] || failed "node $n's link carried $got bytes $dir, less than $want: the traffic did not cross it"
    done
done
echo "PASS: verified allreduces between 2 namespaces over the rate-limited link"
