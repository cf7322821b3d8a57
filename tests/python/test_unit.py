"""The Python package in one process, without msrun: the rules for finding
libmsrun (MSRUN_LIBRARY first and only; the installed layout's _install.py;
a clear ImportError), msr_init's failure as an exception, a job of one
rank (the store with threads waiting on each other, checkpoints, a world
communicator of one), memory handed back by libmsrun freed (run many
times: a wrong free or a leak shows under the sanitizers and in the
process's size) and errors as exceptions; every name the package had
before it was split into private modules. Prints "unit ok" when every
check passed."""

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

import msrun

PY = sys.executable
LIB = os.environ["MSRUN_LIBRARY"]
PKG = os.path.dirname(os.path.abspath(msrun.__file__))


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def python(code, **env):
    """Runs code in a fresh interpreter with env changes (None: unset)."""
    e = dict(os.environ)
    for k, v in env.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return subprocess.run([PY, "-c", code], env=e, capture_output=True, text=True, timeout=30)


# The package's names when python/msrun/__init__.py held it all (issue 44):
# dir(msrun) but the modules it imported, then __all__ as it was. A name lost
# or moved in a split of the package fails check_names.
NAMES = ("Buffer COMM_NO_COLOR COMM_OWN_WORKER Comm Context CorruptError DTYPES Error IN_PLACE "
         "InvalidArgumentError NotFoundError OPS PeerLostError Request StaleError TimeoutError "
         "counts_array init library_path log_set_level parse_op status_name status_str version "
         "wait_all").split()
ALL = ["init", "Context", "Comm", "Request", "wait_all", "Error", "TimeoutError", "NotFoundError",
       "InvalidArgumentError", "StaleError", "PeerLostError", "CorruptError", "version",
       "library_path", "log_set_level", "status_name", "status_str", "DTYPES", "OPS", "IN_PLACE"]
PS_ALL = ["ParameterServer", "join", "role", "init_value", "SYNC", "STALENESS_ENV", "OPTIMIZERS"]
# the classes and functions repr, help and pickle name as msrun's own
OWN = ("Comm Context CorruptError Error InvalidArgumentError NotFoundError PeerLostError Request "
       "StaleError TimeoutError init wait_all").split()


def check_names():
    public = sorted(n for n in dir(msrun) if not n.startswith("_")
                    and not isinstance(getattr(msrun, n), type(os)))
    expect(public == sorted(NAMES), "msrun's names: lost %s, new %s" % (
        sorted(set(NAMES) - set(public)), sorted(set(public) - set(NAMES))))
    expect(msrun.__all__ == ALL, "msrun.__all__ %s" % msrun.__all__)
    for n in OWN:
        expect(getattr(msrun, n).__module__ == "msrun", "msrun.%s's module is %s" % (
            n, getattr(msrun, n).__module__))
    expect((msrun.IN_PLACE, msrun.COMM_OWN_WORKER, msrun.COMM_NO_COLOR) == ("in place", 1, -1),
           "msrun's constants")
    # each name as a user imports it, in a fresh interpreter; msrun.ps's too
    p = python("from msrun import %s\nfrom msrun import *\nfrom msrun.ps import *\n"
               "import msrun.ps\nprint(sorted(msrun.ps.__all__))" % ", ".join(NAMES))
    expect(p.returncode == 0, "from msrun import ...: %s" % p.stderr)
    expect(p.stdout.strip() == str(sorted(PS_ALL)), "msrun.ps.__all__ %s" % p.stdout)


def check_loading(tmp):
    expect(os.path.samefile(msrun.library_path(), LIB), "library_path %s" % msrun.library_path())
    # MSRUN_LIBRARY is the only place tried when set
    p = python("import msrun", MSRUN_LIBRARY=os.path.join(tmp, "nowhere", "libmsrun.so"))
    expect(p.returncode != 0, "a wrong MSRUN_LIBRARY was ignored")
    expect("ImportError" in p.stderr and "nowhere/libmsrun.so" in p.stderr and "MSRUN_LIBRARY" in p.stderr,
           "the ImportError names what was tried: %s" % p.stderr[-400:])
    # the installed layout: <prefix>/lib/python3/dist-packages/msrun beside
    # <prefix>/lib/libmsrun.so.0, found through _install.py alone
    site = os.path.join(tmp, "prefix", "lib", "python3", "dist-packages")
    shutil.copytree(PKG, os.path.join(site, "msrun"),
                    ignore=shutil.ignore_patterns("__pycache__", "_install.py"))
    with open(os.path.join(site, "msrun", "_install.py"), "w") as f:
        f.write('LIBRARY = "../../../libmsrun.so.0"\n')
    os.symlink(os.path.realpath(LIB), os.path.join(tmp, "prefix", "lib", "libmsrun.so.0"))
    p = python("import msrun; print(msrun.library_path())", MSRUN_LIBRARY=None, PYTHONPATH=site,
               LD_LIBRARY_PATH=None)
    expect(p.returncode == 0, "installed layout: %s" % p.stderr[-400:])
    expect(p.stdout.strip() == os.path.join(tmp, "prefix", "lib", "libmsrun.so.0"),
           "installed layout loaded %r" % p.stdout)


def check_init_error():
    # msr_init's failure is an exception with libmsrun's sentence
    code = ("import msrun\n"
            "try:\n"
            "    msrun.init()\n"
            "except msrun.InvalidArgumentError as e:\n"
            "    print(e.name, e.call, '|', e.message)\n")
    p = python(code, MSR_WORLD_SIZE="2", MSR_RANK="0", MSR_AGENT=None, MSR_COORDINATOR=None)
    expect(p.returncode == 0 and p.stdout.startswith("MSR_ERR_INVALID_ARG msr_init |")
           and "needs msrun" in p.stdout, "msr_init's error: %r %r" % (p.stdout, p.stderr[-300:]))

    # started by torchrun (WORLD_SIZE, RANK, MASTER_ADDR, no MSR_*): refused
    # with the variables named; WORLD_SIZE=1 (the bound) or unset runs alone
    torchrun = dict(MSR_WORLD_SIZE=None, MSR_RANK=None, MSR_AGENT=None, MSR_COORDINATOR=None,
                    SLURM_NTASKS=None, RANK="1", MASTER_ADDR="127.0.0.1", LOCAL_RANK="1")
    p = python(code, WORLD_SIZE="2", **torchrun)
    expect(p.returncode == 0 and p.stdout.startswith("MSR_ERR_INVALID_ARG msr_init |")
           and "WORLD_SIZE=2" in p.stdout and "RANK=1" in p.stdout
           and "not started by msrun" in p.stdout,
           "WORLD_SIZE=2 without msrun: %r %r" % (p.stdout, p.stderr[-300:]))
    alone = "import msrun\nc = msrun.init()\nprint('rank %d of %d' % (c.rank, c.world_size))\n"
    for ws in ("1", None):
        p = python(alone, WORLD_SIZE=ws, **torchrun)
        expect(p.returncode == 0 and p.stdout.strip() == "rank 0 of 1",
               "WORLD_SIZE=%s without msrun: %r %r" % (ws, p.stdout, p.stderr[-300:]))


def check_singleton(tmp):
    with msrun.init() as ctx:
        expect((ctx.rank, ctx.world_size, ctx.job_id) == (0, 1, "singleton"), repr(ctx))
        expect(msrun.status_name(-7) == "MSR_ERR_TIMEOUT" and msrun.status_str(0) == "success", "names")
        msrun.log_set_level("error")
        try:
            msrun.log_set_level("loud")
        except ValueError:
            pass
        else:
            raise AssertionError("a bad log level was accepted")
        # threads wait on each other through the in-process store
        got = []
        t = threading.Thread(target=lambda: got.append(ctx.store_get("later", wait_ms=10000)))
        t.start()
        time.sleep(0.2)
        ctx.store_set("later", b"now")
        t.join(20)
        expect(got == [b"now"], "a get waiting in a thread: %r" % got)
        # memory libmsrun hands over is freed: many large values and
        # checkpoints, and the process does not grow by their size
        big = os.urandom(1 << 20)
        ctx.store_set("big", big)
        d = os.path.join(tmp, "ckpt")
        ctx.ckpt_save(d, 0, big)

        def rss_kib():
            with open("/proc/self/status") as f:
                return int([l for l in f if l.startswith("VmRSS")][0].split()[1])

        for _ in range(20):
            expect(ctx.store_get("big", 0) == big, "a large value")
            expect(ctx.ckpt_load(d, 0) == big, "a large checkpoint")
            ctx.store_allgather("g", big)
        before = rss_kib()
        for i in range(200):
            ctx.store_get("big", 0)
            ctx.ckpt_load(d, 0)
            ctx.store_allgather("g%d" % i, b"x" * 1000)
        grown = rss_kib() - before
        expect(grown < 100 * 1024, "200 large gets and loads grew the process by %d KiB" % grown)
        # errors
        try:
            ctx.ckpt_load(d, 5)
        except msrun.NotFoundError as e:
            expect(e.name == "MSR_ERR_NOT_FOUND" and e.call == "msr_ckpt_load", str(e))
        else:
            raise AssertionError("a missing step loaded")
        with open(os.path.join(d, "step-0", "rank-0.bin"), "r+b") as f:
            f.seek(100)
            f.write(b"\xff\xfe")
        try:
            ctx.ckpt_load(d, 0)
        except msrun.CorruptError as e:
            expect("rank-0.bin" in e.message, "the corrupt file named: %s" % e.message)
        else:
            raise AssertionError("a corrupt checkpoint loaded")
        # a world of one
        a = np.arange(5, dtype=np.float32)
        ctx.allreduce(a)
        expect(np.array_equal(a, np.arange(5)), "allreduce of one rank")
        c = ctx.world
        expect((c.rank, c.size) == (0, 1), "world of one")
    ctx.finalize()
    try:
        ctx.store_get("big", 0)
    except msrun.Error as e:
        expect("finalized" in str(e), str(e))
    else:
        raise AssertionError("a call on a finalized context")


def main():
    tmp = tempfile.mkdtemp()
    try:
        check_names()
        check_loading(tmp)
        check_init_error()
        check_singleton(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("unit ok")


if __name__ == "__main__":
    main()
