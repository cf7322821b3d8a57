#!/usr/bin/env python3
"""Measures one emulated link (bench/comm/netns_bench.sh): a TCP ping-pong
of one-byte messages (one-way latency = half the median round trip) and a
stream of bulk data (throughput), between a server and a client run in two
network namespaces.

  netns_link.py serve PORT            answers one client, then exits
  netns_link.py probe HOST PORT [MB]  prints "latency_us=... gbit_s=..."

The server gives up after 30 s without a client (every wait has a deadline);
both exit 1 with a message on any failure."""
import socket
import statistics
import sys
import time

PINGS = 2000
CHUNK = 1 << 20


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        part = s.recv(n - len(buf))
        if not part:
            raise ConnectionError("peer closed the connection")
        buf += part
    return bytes(buf)


def serve(port):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", port))
    ls.listen(1)
    ls.settimeout(30)
    s, _ = ls.accept()
    s.settimeout(30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(PINGS):
        s.sendall(recv_exact(s, 1))
    total = int.from_bytes(recv_exact(s, 8), "little")
    got = 0
    while got < total:
        part = s.recv(min(CHUNK, total - got))
        if not part:
            raise ConnectionError("stream ended early")
        got += len(part)
    s.sendall(b"k")
    s.close()


def probe(host, port, mb):
    s = None
    deadline = time.monotonic() + 10
    while s is None:
        try:
            s = socket.create_connection((host, port), timeout=30)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    for _ in range(PINGS):
        t = time.perf_counter()
        s.sendall(b"p")
        recv_exact(s, 1)
        rtts.append(time.perf_counter() - t)
    total = mb << 20
    data = bytes(CHUNK)
    t = time.perf_counter()
    s.sendall(total.to_bytes(8, "little"))
    sent = 0
    while sent < total:
        s.sendall(data[: min(CHUNK, total - sent)])
        sent += min(CHUNK, total - sent)
    recv_exact(s, 1)
    dt = time.perf_counter() - t
    s.close()
    print("latency_us=%.1f gbit_s=%.2f" % (statistics.median(rtts) / 2 * 1e6, total * 8 / dt / 1e9))


def main(argv):
    try:
        if len(argv) == 3 and argv[1] == "serve":
            serve(int(argv[2]))
        elif len(argv) in (4, 5) and argv[1] == "probe":
            probe(argv[2], int(argv[3]), int(argv[4]) if len(argv) == 5 else 256)
        else:
            print(__doc__.split("\n\n")[1], file=sys.stderr)
            return 2
    except (OSError, ValueError) as e:
        print("netns_link.py: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
