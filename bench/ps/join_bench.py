#!/usr/bin/env python3
"""A killed worker's way back into an asynchronous parameter server, timed
(docs/ps.md "A killed worker replaced alone"). Each run starts
  msrun --worker_num=W+S --ps_servers=S --ps_staleness=K --max_restarts=1
      ps_join_bench
waits for the victim (the last worker) to say it trained its warm-up
steps, kills it with SIGKILL, and reads the stages from the lines that
follow:
  kill        this script's os.kill (CLOCK_REALTIME)
  seen        msrun's "was killed by SIGKILL ... started again alone" line
              arriving here (its stderr read as it comes)
  started     the replacement's main begins (its clock)
  init        its msr_init returned
  joined      its msr_ps_join returned: paired with every server, which
              first took the old process as lost and saw the join
              (they look every 50 ms)
  pushed      its first push acknowledged
Prints a markdown table of the medians (and min, max) over the runs of each
stage's time from the one before and from the kill, with the load average
before and after; a run that fails (or passes --timeout) is said on stderr
with the tail of its output, left out of the table and counted (exit 1).
Times of the replacement are its own clock's, the same
machine's: the stages are comparable to a few microseconds.
UCX_TLS, when set, reaches every rank and is printed with the figures
(docs/ps.md, "The hang": the transports decided whether a victim killed
inside a send hung its run before every link was a pair of its own).

With --startup join|create nothing is killed: each run times every
rank's making of the parameter server (msr_ps_join, or msr_ps_create on a
world made before it), and the table gives the median (min - max) over
the runs of the slowest worker's and the slowest server's.

Usage: bench/ps/join_bench.py [--runs N] [--workers W] [--servers S]
                              [--staleness K] [--build DIR]
                              [--startup join|create]
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

STAGES = ["kill", "seen", "started", "init", "joined", "pushed"]
SEEN = re.compile(r"was killed by SIGKILL: asynchronous parameter server worker, started again")
READY = re.compile(r"jb ready pid=(\d+)")
REPLACED = re.compile(r"jb replaced inc=1 start=([\d.]+) init=([\d.]+) joined=([\d.]+) "
                      r"pushed=([\d.]+)")
MADE = re.compile(r"jb made rank=(\d+) role=(worker|server) secs=([\d.]+)")


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class Run:
    """One msrun job: its output lines stamped as they arrive."""

    def __init__(self, cmd, timeout):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        self.cond = threading.Condition()
        self.lines = []  # (arrival, line)
        self.deadline = time.monotonic() + timeout
        self.readers = [threading.Thread(target=self._read, args=(s,), daemon=True)
                        for s in (self.proc.stdout, self.proc.stderr)]
        for r in self.readers:
            r.start()

    def _read(self, stream):
        for line in stream:
            t = time.time()
            with self.cond:
                self.lines.append((t, line.rstrip("\n")))
                self.cond.notify_all()

    def wait_for(self, pattern):
        """The first line matching pattern and its arrival; None past the deadline."""
        with self.cond:
            while True:
                for t, line in self.lines:
                    m = pattern.search(line)
                    if m:
                        return t, m
                left = self.deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and
                                 not any(r.is_alive() for r in self.readers)):
                    return None
                self.cond.wait(min(left, 0.2))

    def finish(self):
        try:
            code = self.proc.wait(max(1.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            code = self.proc.wait()
        for r in self.readers:
            r.join(5)
        return code


def command(args, build):
    np = args.workers + args.servers
    cmd = [os.path.join(build, "bin", "msrun"), "--worker_num=%d" % np,
           "--local_worker_num=%d" % np, "--ps_servers=%d" % args.servers,
           "--ps_staleness=%d" % args.staleness, "--max_restarts=1",
           os.path.join(build, "bin", "ps_join_bench")]
    if args.startup:
        cmd += ["--make", args.startup, "--warmup", "8"]
    return cmd


def startup(args, build):
    """One run's slowest worker's and server's start-up, seconds."""
    run = Run(command(args, build), args.timeout)
    code = run.finish()
    made = [MADE.search(line) for _, line in run.lines]
    made = [m for m in made if m]
    if code != 0 or len(made) != args.workers + args.servers:
        tail = "\n".join(line for _, line in run.lines[-8:])
        return None, "msrun exited %s, %d ranks said they made it:\n%s" % (code, len(made), tail)
    return [max(float(m[3]) for m in made if m[2] == role) for role in ("worker", "server")], None


def one(args, build):
    if args.startup:
        return startup(args, build)
    run = Run(command(args, build), args.timeout)
    ready = run.wait_for(READY)
    if ready is None:
        run.finish()
        return None, "the victim never said it was ready"
    t_kill = time.time()
    os.kill(int(ready[1].group(1)), signal.SIGKILL)
    seen = run.wait_for(SEEN)
    rep = run.wait_for(REPLACED)
    code = run.finish()
    if seen is None or rep is None or code != 0:
        tail = "\n".join(line for _, line in run.lines[-8:])
        return None, "msrun exited %s, the replacement %s:\n%s" % (
            code, "timed" if rep else "did not say it pushed", tail)
    return [t_kill, seen[0]] + [float(rep[1].group(i)) for i in range(1, 5)], None


def ms(v):
    return "%.1f" % (v * 1e3)


def table(runs):
    print("| stage | from the stage before, ms: median (min - max) | from the kill, ms: median |")
    print("|---|---|---|")
    for i in range(1, len(STAGES)):
        step = [r[i] - r[i - 1] for r in runs]
        total = [r[i] - r[0] for r in runs]
        print("| %s -> %s | %s (%s - %s) | %s |" % (STAGES[i - 1], STAGES[i],
                                                   ms(statistics.median(step)), ms(min(step)),
                                                   ms(max(step)), ms(statistics.median(total))))


def startup_table(args, runs):
    print("| making (%s) | slowest worker, ms: median (min - max) | slowest server |" %
          ("msr_ps_join" if args.startup == "join" else "msr_ps_create"))
    print("|---|---|---|")
    cols = ["%s (%s - %s)" % (ms(statistics.median(v)), ms(min(v)), ms(max(v)))
            for v in ([r[0] for r in runs], [r[1] for r in runs])]
    print("| %d workers + %d servers, staleness %d | %s | %s |" %
          (args.workers, args.servers, args.staleness, cols[0], cols[1]))


def main():
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--servers", type=int, default=2)
    p.add_argument("--staleness", type=int, default=2)
    p.add_argument("--timeout", type=float, default=60, help="seconds for one run")
    p.add_argument("--build", default=os.environ.get("MSRUN_BUILD", os.path.join(here, "build")))
    p.add_argument("--startup", choices=("join", "create"),
                   help="time the making at the start instead of a replacement")
    args = p.parse_args()
    if args.runs < 1 or args.workers < 2 or args.servers < 1 or args.staleness < -1 or (
            args.staleness < 0 and not args.startup):
        p.error("--runs >= 1, --workers >= 2, --servers >= 1, --staleness >= 0 "
                "(-1, synchronous, with --startup)")
    build = os.path.abspath(args.build)
    for b in ("msrun", "ps_join_bench"):
        if not os.access(os.path.join(build, "bin", b), os.X_OK):
            p.error("%s/bin/%s is missing: build first" % (build, b))
    print("# %d CPUs; load average before: %s; %d runs of %d workers + %d servers, "
          "staleness %d; UCX_TLS=%s" % (os.cpu_count(), load(), args.runs, args.workers,
                                        args.servers, args.staleness,
                                        os.environ.get("UCX_TLS") or "(the engine's choice)"))
    runs, failed = [], 0
    for i in range(args.runs):
        r, why = one(args, build)
        if r is None:
            failed += 1
            print("join_bench: run %d failed: %s" % (i + 1, why), file=sys.stderr)
        else:
            runs.append(r)
    print("# load average after: %s; %d of %d runs failed (stderr says how)"
          % (load(), failed, args.runs))
    if runs and args.startup:
        startup_table(args, runs)
    elif runs:
        table(runs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
