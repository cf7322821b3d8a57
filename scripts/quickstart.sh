#!/bin/bash
# Quick start: installs what is missing, builds, and runs the main job:
# msrun training the example model on 4 local workers with its embedded
# coordinator.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build
cmake -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
main_job=(build/bin/hello_store)
echo "+ build/bin/msrun --worker_num=4 --local_worker_num=4 ${main_job[*]}"
exec build/bin/msrun --worker_num=4 --local_worker_num=4 "${main_job[@]}"
