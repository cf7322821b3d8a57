#!/usr/bin/env python3
"""Prints N (default 1) distinct TCP ports that are free on this host, for a
test or benchmark to hand to the servers it starts.

The ports come from below the kernel's ephemeral range
(net.ipv4.ip_local_port_range), not from it: a port the kernel handed out
for bind(0) is free only until some connect() takes it as its own end, and
a client that retries toward a port of that range on loopback can even
connect to itself. Below the range no connect() is given the port, so it
stays free until the server that was meant to get it binds it.

That alone does not keep two tests that run side by side (ctest -j2) from
picking the same port: both find it free before either server binds it.
With MSRUN_PORT_CLAIMS set to a directory (the tests' lib.sh sets one in
the build directory), each port handed out is claimed there by a file
named after it holding its owner's pid (MSRUN_PORT_OWNER, the test's
shell; else this script's parent), under a lock over the whole choice: a
port claimed by a live owner is never handed out again, and a dead
owner's claims are taken over. A reused pid only keeps a port out of the
choice a while longer. MSRUN_PORT_RANGE=LO:HI restricts the choice to
those ports (for the test of the claims).

With --consecutive (before N), the N ports are consecutive: P, P+1, ...
(a job whose relays listen on master_port + 1 + their group)."""
import fcntl
import os
import random
import socket
import sys


def ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
            return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free(port):
    """Whether port can be bound on every address, as a listener would."""
    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 here
        try:
            s.bind((addr, port))
        except OSError:
            return False
        finally:
            s.close()
    return True


def owner_alive(path):
    """Whether the claim at path belongs to a process that still runs."""
    try:
        with open(path) as f:
            pid = int(f.read().strip() or "0")
    except (OSError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's live process
    return True


def pool_of():
    """The ports to choose from."""
    want = os.environ.get("MSRUN_PORT_RANGE")
    if want:
        low, high = (int(x) for x in want.split(":"))
        return range(low, high + 1)
    low, high = ephemeral_range()
    # below the range when it leaves room there, else above it
    if low - 10000 >= 4096:
        return range(10000, low)
    if 65535 - high >= 4096:
        return range(high + 1, 65536)
    return range(1024, 65536)


def usable(port, claims):
    """Whether port is free and claimed by no live owner."""
    path = os.path.join(claims, str(port)) if claims else None
    return not (path and owner_alive(path)) and free(port)


def choose(n, pool, claims, consecutive=False):
    """n free ports of pool (consecutive ones when asked), none claimed by
    a live owner; claimed now for this owner when claims is a directory."""
    owner = os.environ.get("MSRUN_PORT_OWNER") or str(os.getppid())
    got = []
    for port in random.sample(pool, min(len(pool), 2000)):
        if consecutive:
            run = list(range(port, port + n))
            if run[-1] in pool and all(usable(p, claims) for p in run):
                got = run
                break
            continue
        if port in got or not usable(port, claims):
            continue
        got.append(port)
        if len(got) == n:
            break
    if len(got) < n:
        return None
    for port in got if claims else ():
        tmp = os.path.join(claims, ".%d.%d" % (port, os.getpid()))
        with open(tmp, "w") as f:
            f.write(owner + "\n")
        os.replace(tmp, os.path.join(claims, str(port)))
    return got


def main():
    args = sys.argv[1:]
    consecutive = bool(args) and args[0] == "--consecutive"
    if consecutive:
        args = args[1:]
    n = int(args[0]) if args else 1
    claims = os.environ.get("MSRUN_PORT_CLAIMS")
    lock = None
    if claims:
        os.makedirs(claims, exist_ok=True)
        lock = open(os.path.join(claims, ".lock"), "w")
        fcntl.flock(lock, fcntl.LOCK_EX)  # released at exit
    got = choose(n, pool_of(), claims, consecutive)
    if got is None:
        sys.stderr.write("free_port.py: no free port found\n")
        return 1
    print("\n".join(str(p) for p in got))
    return 0


if __name__ == "__main__":
    sys.exit(main())
