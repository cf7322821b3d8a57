#!/usr/bin/python3
"""An unchanged PyTorch program under msrun: init_process_group("gloo") reads
RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, which msrun sets.

    msrun --worker_num=4 --local_worker_num=4 /usr/bin/python3 examples/torch_allreduce.py

Every rank contributes rank + 1; the allreduce's sum must be n(n+1)/2 on
every rank. Rank 0 prints the result."""
import os
import sys

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")  # env:// by default
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
    t = torch.tensor([float(rank + 1)] * 4)
    dist.all_reduce(t)
    want = world * (world + 1) / 2
    if not torch.all(t == want):
        print(f"rank {rank}: allreduce gave {t.tolist()}, want {want}", file=sys.stderr)
        return 1
    gathered = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(gathered, torch.tensor([float(rank)]))
    if [int(g.item()) for g in gathered] != list(range(world)):
        print(f"rank {rank}: all_gather gave {gathered}", file=sys.stderr)
        return 1
    dist.barrier()
    if rank == 0:
        print(f"torch {torch.__version__}: allreduce over {world} ranks "
              f"(local world {os.environ['LOCAL_WORLD_SIZE']}, node {os.environ['GROUP_RANK']}) "
              f"= {t[0].item():.0f}, as expected")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
