#!/usr/bin/env bash
# Checkpoints across devices, under msrun: a GPU run of 10 steps (2 ranks on
# one GPU) against runs that stop at step 5 and resume: GPU -> GPU (2 ranks),
# GPU -> CPU (1 rank), CPU -> GPU (1 rank), and (2 ranks) with the optimizer
# on the host (--offload optimizer=host) -> on the device and the other way
# round. Steps 6..10 of every resumed
# run must match the uninterrupted GPU run within 1e-4 relative. Exits 77
# (skipped) when this machine has no usable GPU.
set -u
build=${MSRUN_BUILD:?MSRUN_BUILD is not set}
job=gpuckpt-$$-$RANDOM
work=$(mktemp -d)
source "$(dirname "$0")/../job_env.sh"
cleanup() {
    for j in a b c d e f g h i; do kill_job "$job-$j"; done
    rm -rf "$work"
}
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { cleanup; }' EXIT
fail() {
    echo "FAIL: $*"
    exit 1
}

if ! timeout -k 5 60 "$build/bin/train_gpt" --device cuda --steps 0 >"$work/probe" 2>&1; then
    # skipped only where there is no GPU; any other CUDA error (an old
    # driver, say) fails the test
    if grep -q "no CUDA device here\|no CUDA training path" "$work/probe"; then
        echo "skip: no GPU here:"
        cat "$work/probe"
        exit 77
    fi
    cat "$work/probe"
    fail "train_gpt --device cuda could not start"
fi
vis=${CUDA_VISIBLE_DEVICES:-0}
export CUDA_VISIBLE_DEVICES=${vis%%,*}
train=(--layers 2 --channels 64 --heads 4 --seq 32 --micro-batch 2 --global-batch 8
    --warmup 2 --corpus-bytes 65536)

# run TAG NP ARGS...: train_gpt under msrun, output in $work/TAG.out
run() {
    local tag=$1 np=$2 rc=0
    shift 2
    timeout -k 5 240 "${msrun_cmd[@]}" --worker_num="$np" --local_worker_num="$np" \
        --job_id="$job-$tag" "${worker_env[@]}" "$build/bin/train_gpt" "${train[@]}" "$@" \
        >"$work/$tag.out" 2>&1 || rc=$?
    cat "$work/$tag.out"
    [[ $rc -eq 0 ]] || fail "run $tag exited $rc"
}
# same LOG: steps 6..10 of LOG against the uninterrupted run's
dec() {
    local w1 n w3 loss rest
    while read -r w1 n w3 loss rest; do
        [[ $w1 == step && $n -gt 5 ]] && printf '%s %.17g\n' "$n" "$loss"
    done <"$1"
}
same() {
    paste -d' ' <(dec "$work/full.log") <(dec "$1") | awk -v what="$2" '
        { c = $2 + 0; g = $4 + 0; d = c - g; if (d < 0) d = -d
          printf "%s step %s loss %.6f uninterrupted %.6f rel %.2e\n", what, $1, g, c, d / c
          if ($1 != $3 || d > 1e-4 * c) bad = 1; n++ }
        END { if (n != 5) { print "FAIL: " what ": " n " steps after 5, not 5"; exit 1 }
              if (bad) { print "FAIL: " what ": losses differ by more than 1e-4"; exit 1 } }' ||
        exit 1
}

run a 2 --device cuda --steps 10 --loss-log "$work/full.log"
run b 2 --device cuda --steps 5 --ckpt-dir "$work/g"
cp -r "$work/g" "$work/g2"
cp -r "$work/g" "$work/g3"
run c 2 --device cuda --steps 10 --ckpt-dir "$work/g" --resume --loss-log "$work/gg.log"
grep -q "resumed from step 5" "$work/c.out" || fail "GPU -> GPU did not resume"
same "$work/gg.log" "gpu->gpu"
run d 1 --device cpu --steps 10 --ckpt-dir "$work/g2" --resume --loss-log "$work/gc.log"
grep -q "resumed from step 5" "$work/d.out" || fail "GPU -> CPU did not resume"
same "$work/gc.log" "gpu->cpu"
run e 1 --device cpu --steps 5 --ckpt-dir "$work/c"
run f 1 --device cuda --steps 10 --ckpt-dir "$work/c" --resume --loss-log "$work/cg.log"
grep -q "resumed from step 5" "$work/f.out" || fail "CPU -> GPU did not resume"
same "$work/cg.log" "cpu->gpu"
host=(--offload optimizer=host --offload-chunk 4096)
run g 2 --device cuda --steps 5 --ckpt-dir "$work/h" "${host[@]}"
grep -q "AdamW on the host" "$work/g.out" || fail "optimizer=host did not update on the host"
run h 2 --device cuda --steps 10 --ckpt-dir "$work/h" --resume --loss-log "$work/hg.log"
grep -q "resumed from step 5" "$work/h.out" || fail "host optimizer -> GPU did not resume"
same "$work/hg.log" "host->gpu"
run i 2 --device cuda --steps 10 --ckpt-dir "$work/g3" --resume "${host[@]}" \
    --loss-log "$work/gh.log"
grep -q "resumed from step 5" "$work/i.out" || fail "GPU -> host optimizer did not resume"
same "$work/gh.log" "gpu->host"
echo "gpu_ckpt_check: ok"
