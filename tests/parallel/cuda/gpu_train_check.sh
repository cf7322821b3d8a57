#!/usr/bin/env bash
# train_gpt --device cuda against --device cpu: 10 steps of the same model,
# data and global batch; every step's loss must match within 1e-4 relative.
#   gpu_train_check.sh NP MODE [OPTION...]    MODE: nccl | staged | alone
# (OPTIONs go to the GPU run only, e.g. --bucket-mb 0.01 for many buckets;
# but --precision bf16 goes to the CPU's reference too, and --layers N sets
# both models' depth, 2 without it)
# In bf16 the two compute the same fp32 values up to the order of their
# sums, which is the layouts' case of tests/parallel/train_gpt_bf16.sh and
# its derived tolerance: |loss - CPU's| <= loss / 128 a step (2u x loss, u
# = 2^-8). That bound is loose, so the GPU's losses must also stay away
# from the CPU's fp32 ones: their largest difference at least a quarter of
# the CPU's own bf16 against fp32 (a GPU that left its products in fp32
# lands within 1e-4 relative of those and fails).
# alone: one process without msrun; nccl: NP ranks under msrun, each on a
# GPU of its own (NP 1: an NCCL world of one rank); staged: NP ranks on one
# GPU (the first visible), where the device communicator must choose the
# staged path through host memory by itself. Exits 77 (skipped) when this
# machine has no usable GPU.
set -u
np=$1
mode=$2
shift 2
extra=()
layers=2
while [[ $# -gt 0 ]]; do
    if [[ $1 == --layers ]]; then
        layers=$2
        shift 2
    else
        extra+=("$1")
        shift
    fi
done
build=${MSRUN_BUILD:?MSRUN_BUILD is not set}
job=gputrain-$np-$$-$RANDOM
work=$(mktemp -d)
source "$(dirname "$0")/../job_env.sh"
cleanup() {
    kill_job "$job"
    rm -rf "$work"
}
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { cleanup; }' EXIT

train=(--layers "$layers" --channels 64 --heads 4 --seq 32 --micro-batch 2 --global-batch 8
    --steps 10 --warmup 2 --corpus-bytes 65536)

# the probe: a process alone sets the GPU up and trains no step
if ! timeout -k 5 60 "$build/bin/train_gpt" --device cuda --steps 0 >"$work/probe" 2>&1; then
    # skipped only where there is no GPU; any other CUDA error (an old
    # driver, say) fails the test
    if grep -q "no CUDA device here\|no CUDA training path" "$work/probe"; then
        echo "skip: no GPU here:"
        cat "$work/probe"
        exit 77
    fi
    cat "$work/probe"
    echo "FAIL: train_gpt --device cuda could not start"
    exit 1
fi

bf16=0
[[ " ${extra[*]} " == *" --precision bf16 "* ]] && bf16=1
cpu_args=()
[[ $bf16 -eq 1 ]] && cpu_args=(--precision bf16)
timeout -k 5 120 "$build/bin/train_gpt" "${train[@]}" "${cpu_args[@]}" --loss-log "$work/cpu.log" \
    >"$work/cpu.out" 2>&1 || {
    cat "$work/cpu.out"
    echo "FAIL: the CPU reference run failed"
    exit 1
}
if [[ $bf16 -eq 1 ]]; then
    timeout -k 5 120 "$build/bin/train_gpt" "${train[@]}" --loss-log "$work/cpu32.log" \
        >"$work/cpu32.out" 2>&1 || {
        cat "$work/cpu32.out"
        echo "FAIL: the CPU's fp32 run failed"
        exit 1
    }
fi
rc=0
if [[ $mode == alone ]]; then
    timeout -k 5 120 "$build/bin/train_gpt" "${train[@]}" --device cuda "${extra[@]}" \
        --loss-log "$work/gpu.log" >"$work/gpu.out" 2>&1 || rc=$?
else
    if [[ $mode == staged ]]; then
        vis=${CUDA_VISIBLE_DEVICES:-0}
        export CUDA_VISIBLE_DEVICES=${vis%%,*}
    fi
    timeout -k 5 240 "${msrun_cmd[@]}" --worker_num="$np" \
        --local_worker_num="$np" --job_id="$job" "${worker_env[@]}" \
        "$build/bin/train_gpt" "${train[@]}" --device cuda "${extra[@]}" \
        --loss-log "$work/gpu.log" >"$work/gpu.out" 2>&1 || rc=$?
fi
cat "$work/gpu.out"
if [[ $rc -ne 0 ]]; then
    echo "FAIL: train_gpt --device cuda ($mode, $np ranks) exited $rc"
    exit 1
fi
if [[ $mode != alone ]] && ! grep -q "gradients over $mode" "$work/gpu.out"; then
    echo "FAIL: the job did not choose the $mode device communicator"
    exit 1
fi
if [[ " ${extra[*]} " == *[\ ,]optimizer=host[\ ,]* ]] && ! grep -q "AdamW on the host" "$work/gpu.out"; then
    echo "FAIL: --offload optimizer=host did not put the update on the host"
    exit 1
fi
if [[ " ${extra[*]} " == *[\ ,]params=host[\ ,]* ]] &&
    ! grep -q "the blocks' parameters and gradients in host memory" "$work/gpu.out"; then
    echo "FAIL: --offload params=host did not keep the blocks in host memory"
    exit 1
fi
# the loss logs hold exact values (%a): bash's printf reads them
dec() {
    local w1 n w3 loss rest
    while read -r w1 n w3 loss rest; do
        [[ $w1 == step ]] && printf '%s %.17g\n' "$n" "$loss"
    done <"$1"
}
if [[ $bf16 -eq 1 ]]; then
    grep -q "bf16 products on cuBLAS" "$work/gpu.out" || {
        echo "FAIL: the GPU run did not say it runs its products in bf16"
        exit 1
    }
    # head size 16 on an sm_80+ GPU: attention must take the fused kernel
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 || true)
    if [[ $cc =~ ^([0-9]+)\. ]] && ((BASH_REMATCH[1] >= 8)); then
        grep -q "attention fused on the tensor cores" "$work/gpu.out" || {
            echo "FAIL: the GPU run's attention (sm $cc) did not take the fused bf16 kernel"
            exit 1
        }
    else
        echo "the GPU's compute capability is '$cc': the fused attention is not required"
    fi
    paste -d' ' <(dec "$work/cpu.log") <(dec "$work/gpu.log") <(dec "$work/cpu32.log") | awk '
        { c = $2 + 0; g = $4 + 0; f = $6 + 0; d = c - g; if (d < 0) d = -d
          e = g - f; if (e < 0) e = -e; o = c - f; if (o < 0) o = -o
          printf "step %s loss cpu bf16 %.6f gpu bf16 %.6f (diff %.2e) cpu fp32 %.6f\n", $1, c, g, d, f
          if ($1 != $3 || $1 != $5 || d > c / 128) bad = 1
          if (e > far) far = e; if (o > own) own = o; n++ }
        END { if (n != 10) { print "FAIL: " n " steps logged, not 10"; exit 1 }
              if (bad) { print "FAIL: the GPU bf16 losses differ from the CPU bf16 ones by more than loss / 128"; exit 1 }
              printf "largest |gpu bf16 - cpu fp32| %.2e, |cpu bf16 - cpu fp32| %.2e\n", far, own
              if (own == 0 || far < own / 4) { print "FAIL: the GPU bf16 losses are not away from fp32"; exit 1 } }' ||
        exit 1
else
    paste -d' ' <(dec "$work/cpu.log") <(dec "$work/gpu.log") | awk '
        { c = $2 + 0; g = $4 + 0; d = c - g; if (d < 0) d = -d
          printf "step %s loss cpu %.6f gpu %.6f rel %.2e\n", $1, c, g, d / c
          if ($1 != $3 || d > 1e-4 * c) bad = 1; n++ }
        END { if (n != 10) { print "FAIL: " n " steps logged, not 10"; exit 1 }
              if (bad) { print "FAIL: losses differ by more than 1e-4 relative"; exit 1 } }' || exit 1
fi
echo "gpu_train_check $np $mode: ok"
