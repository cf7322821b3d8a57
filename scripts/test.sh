#!/bin/bash
# Builds and runs the whole test suite: the module dependency check, the
# normal build's tests, and the same tests in an address+undefined sanitizer
# build. Set MSRUN_SKIP_SANITIZE=1 to skip the sanitizer pass.
#
# ctest runs two tests at a time (MSRUN_TEST_JOBS sets how many): most of
# a test's time is spent waiting for states (processes starting, a
# heartbeat's deadline, a port answering), and every test is written to
# run beside another (ports claimed per test, leftovers counted by the
# test's own job id: docs/testing.md). One at a time the suite took about
# twice as long on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
jobs=$(nproc)
test_jobs=${MSRUN_TEST_JOBS:-2}
start=$(date +%s)

echo "== module dependency direction"
scripts/check-deps.sh .

echo "== build"
cmake -B build -DMSRUN_WERROR=ON >/dev/null
cmake --build build -j"$jobs"
scripts/check-deps.sh --binaries build

echo "== tests"
(cd build && ctest --output-on-failure -j"$test_jobs" --timeout 600)

if [ "${MSRUN_SKIP_SANITIZE:-0}" != 1 ]; then
    echo "== address+undefined sanitizer build and tests"
    cmake -B build-asan -DMSRUN_SANITIZE=address,undefined -DMSRUN_WERROR=ON \
        -DMSRUN_CUDA=OFF >/dev/null
    cmake --build build-asan -j"$jobs"
    (cd build-asan && ctest --output-on-failure -j"$test_jobs" --timeout 900 -LE nosan)
fi
if [ "${MSRUN_SKIP_FUZZ:-0}" != 1 ] && command -v clang >/dev/null; then
    echo "== fuzzing the coordinator's request handling (${MSRUN_FUZZ_SECONDS:-30} s)"
    cmake -B build-fuzz -DCMAKE_C_COMPILER=clang -DMSRUN_FUZZ=ON \
        -DMSRUN_SANITIZE=address,undefined -DMSRUN_CUDA=OFF >/dev/null
    cmake --build build-fuzz -j"$jobs" --target fuzz_coord
    work=$(mktemp -d)
    build-fuzz/tests/fuzz_coord -max_total_time="${MSRUN_FUZZ_SECONDS:-30}" -print_final_stats=1 \
        -artifact_prefix="$work/" "$work" tests/fuzz/corpus/coord 2>&1 | tail -n 3
    rm -rf "$work"
    echo "== fuzzing the node's state machine (${MSRUN_FUZZ_SECONDS:-30} s)"
    cmake --build build-fuzz -j"$jobs" --target fuzz_node
    work=$(mktemp -d)
    build-fuzz/tests/fuzz_node -max_total_time="${MSRUN_FUZZ_SECONDS:-30}" -print_final_stats=1 \
        -artifact_prefix="$work/" "$work" tests/fuzz/corpus/node 2>&1 | tail -n 3
    rm -rf "$work"
    echo "== fuzzing where a checkpoint file was cut (${MSRUN_FUZZ_SECONDS:-30} s)"
    cmake --build build-fuzz -j"$jobs" --target fuzz_ckpt_cut
    work=$(mktemp -d)
    build-fuzz/tests/fuzz_ckpt_cut -max_total_time="${MSRUN_FUZZ_SECONDS:-30}" \
        -print_final_stats=1 -artifact_prefix="$work/" "$work" tests/fuzz/corpus/ckpt_cut 2>&1 |
        tail -n 3
    rm -rf "$work"
fi
echo "== all tests passed in $(($(date +%s) - start)) s"
