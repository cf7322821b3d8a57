"""The preamble every worker of msrun's torch backend tests shares: torch,
torch.distributed and msrun.torch (which registers the "msrun" backend),
or exit 77 (skipped) with the reason when torch is missing, or when the
backend's module was not built (MSRUN_TORCH_BACKEND=ON, set by CTest where
it was built, makes a module that does not load a failure instead).
Usage: from torch_worker import torch, dist, mt"""

import os
import sys

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    print("SKIP: torch cannot be imported (Debian: python3-torch): %s" % e)
    sys.exit(77)

try:
    import msrun.torch as mt
except ImportError as e:
    if os.environ.get("MSRUN_TORCH_BACKEND") == "ON":  # built: it must load
        raise
    print("SKIP: msrun.torch cannot be loaded: %s" % e)
    sys.exit(77)

__all__ = ["torch", "dist", "mt"]
