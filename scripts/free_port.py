#!/usr/bin/env python3
"""Prints N (default 1) distinct TCP ports that are free on this host, for a
test or benchmark to hand to the servers it starts.

The ports come from below the kernel's ephemeral range
(net.ipv4.ip_local_port_range), not from it: a port the kernel handed out
for bind(0) is free only until some connect() takes it as its own end, and
a client that retries toward a port of that range on loopback can even
connect to itself. Below the range no connect() is given the port, so it
stays free until the server that was meant to get it binds it."""
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


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    low, high = ephemeral_range()
    # below the range when it leaves room there, else above it
    if low - 10000 >= 4096:
        pool = range(10000, low)
    elif 65535 - high >= 4096:
        pool = range(high + 1, 65536)
    else:
        pool = range(1024, 65536)
    got = []
    for port in random.sample(pool, min(len(pool), 2000)):
        if port not in got and free(port):
            got.append(port)
            if len(got) == n:
                print("\n".join(str(p) for p in got))
                return 0
    sys.stderr.write("free_port.py: no free port found\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
