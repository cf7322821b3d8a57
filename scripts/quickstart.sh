#!/bin/bash
# Quick start: installs what is missing, builds, and runs the main job:
# msrun training the reference GPT (build/bin/train_gpt) on 4 local workers,
# data parallel with ZeRO stage 1, with its embedded coordinator; rank 0
# prints the loss of each of the 20 steps as it falls.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build
cmake -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target msrun_cli train_gpt
main_job=(build/bin/train_gpt --steps 20 --zero 1)
echo "+ build/bin/msrun --worker_num=4 --local_worker_num=4 ${main_job[*]}"
exec build/bin/msrun --worker_num=4 --local_worker_num=4 "${main_job[@]}"
