#!/usr/bin/env bash
# A driver too old for the CUDA runtime fails the GPU tests instead of
# skipping them (before, every GPU test counted as skipped on it). With a
# stub libcuda.so.1 that reports CUDA 10.0 first on the library path, the
# runtime answers cudaErrorInsufficientDriver with a driver installed, and:
# test_cuda_gpt fails naming it, gpu_worker's probe (tests/comm) fails, the
# comm table's probe (test_gpu_cuda runtime_here) fails, the device
# interface's CUDA conformance (test_device_cuda) fails, and train_gpt
# --device cuda, which gpu_train_check.sh probes, fails that check. Needs no
# GPU: the stub stands in for whatever driver the machine has.
set -u
build=${MSRUN_BUILD:?MSRUN_BUILD is not set}
here=$(dirname "$0")
out=$(mktemp)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -f "$out"; }' EXIT
fail() {
    echo "FAIL: $*"
    cat "$out"
    exit 1
}
export LD_LIBRARY_PATH=$build/tests/old_driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# expect_fail WHAT CMD...: CMD exits with a failure (not 0, not 77 "skipped")
# and names CUDA's error
expect_fail() {
    local what=$1 rc=0
    shift
    timeout -k 5 120 "$@" >"$out" 2>&1 || rc=$?
    [[ $rc -ne 0 && $rc -ne 77 ]] || fail "$what exited $rc under a driver too old, not a failure"
    grep -q "cudaErrorInsufficientDriver\|insufficient for CUDA runtime" "$out" ||
        fail "$what did not name CUDA's error"
    echo "$what: fails (rc $rc)"
}

expect_fail test_cuda_gpt "$build/tests/test_cuda_gpt"
expect_fail "gpu_worker probe" "$build/tests/gpu_worker" probe 1
expect_fail "test_gpu_cuda runtime_here" "$build/tests/test_gpu_cuda" runtime_here
expect_fail test_device_cuda "$build/tests/test_device_cuda"
expect_fail gpu_train_check.sh bash "$here/gpu_train_check.sh" 1 alone
echo "old_driver: ok"
