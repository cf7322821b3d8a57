"""A peer lost in the middle of a collective of msrun's torch backend: the
last rank SIGKILLs itself while every rank loops allreduces of 1 MiB; each
survivor's collective must raise RuntimeError (MSR_ERR_PEER_LOST) within the
group's deadline, not hang. Each survivor prints "rank R survived: <the
error's status> after S s"; msrun exits with the victim's 137."""

import os
import signal
import sys
import threading
import time
from datetime import timedelta

from torch_worker import dist, torch  # noqa: F401  (registers the backend)

DEADLINE_S = 20


def main():
    torch.set_num_threads(1)
    dist.init_process_group("msrun", timeout=timedelta(seconds=DEADLINE_S))
    rank, n = dist.get_rank(), dist.get_world_size()
    t = torch.ones(1 << 18)
    dist.all_reduce(t)
    victim = rank == n - 1
    # msrun stops the survivors (SIGTERM) once it sees the victim die: they
    # stay, to show how their own collectives end (run_torchkill.sh gives a
    # grace period longer than the deadline)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if victim:
        # dies while the survivors are inside allreduces
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    start = time.monotonic()
    try:
        while True:
            dist.all_reduce(t)
            if time.monotonic() - start > 3 * DEADLINE_S:
                print("rank %d: allreduces never failed" % rank, flush=True)
                sys.exit(1)
    except RuntimeError as e:
        took = time.monotonic() - start
        status = next((w for w in str(e).replace(":", " ").split() if w.startswith("MSR_ERR_")), "?")
        if took > DEADLINE_S:
            print("rank %d: the failure took %.1f s, over the %d s deadline" % (rank, took, DEADLINE_S), flush=True)
            sys.exit(1)
        print("rank %d survived: %s after %.1f s" % (rank, status, took), flush=True)


main()
