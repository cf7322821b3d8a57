#!/usr/bin/env bash
# The reference model, dense and with MoE blocks, against PyTorch
# (torch_check.py); skipped (exit 77)
# when /usr/bin/python3 cannot import torch.
set -euo pipefail
if ! timeout 60 /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    echo "SKIP: /usr/bin/python3 cannot import torch (install python3-torch to run this check)"
    exit 77
fi
work=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$work"; }' EXIT
timeout 60 "$MSRUN_BUILD/tests/gpt_torch_dump" "$work/dump.bin"
timeout 120 /usr/bin/python3 "$MSRUN_SOURCE/tests/parallel/torch_check.py" "$work/dump.bin"
# the same with Mixture-of-Experts blocks (routing, capacity, aux loss)
timeout 60 "$MSRUN_BUILD/tests/gpt_torch_dump" "$work/moe.bin" moe
timeout 120 /usr/bin/python3 "$MSRUN_SOURCE/tests/parallel/torch_check.py" "$work/moe.bin"
