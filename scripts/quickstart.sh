#!/bin/bash
# Quick start: installs what is missing, builds, and runs the main job:
# msrun training the reference GPT (build/bin/train_gpt) on 4 local workers,
# data parallel with ZeRO stage 1, with its embedded coordinator; rank 0
# prints the loss of each of the 20 steps as it falls. It builds everything
# (the default target): what `cmake --install build --prefix P` installs and
# every build/bin program the README names (plan_gpt among them); deps.sh
# also installs python3-numpy for the README's Python example.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build
cmake -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
main_job=(build/bin/train_gpt --steps 20 --zero 1)
echo "+ build/bin/msrun --worker_num=4 --local_worker_num=4 ${main_job[*]}"
exec build/bin/msrun --worker_num=4 --local_worker_num=4 "${main_job[@]}"
