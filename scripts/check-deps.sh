#!/usr/bin/env python3
"""Checks the module dependency direction of docs/architecture.md section 2.

  scripts/check-deps.sh [ROOT]            checks the includes of ROOT's sources
  scripts/check-deps.sh --binaries BUILD  checks that the launcher links no
                                          data-plane or GPU library

An include crosses a line when what it names may not be used by the
including file's module, or when anything it brings in, through headers of
the tree however deep, may not be (a header a module may include that
itself includes a forbidden one). "msrun/x.h" names only the public
headers (include/msrun/): the launcher's own headers are "launcher/x.h",
in the launcher and in the tests, benchmarks and examples alike. Exits 1
and names every include that crosses a line (with the chain of headers
for an indirect one), 0 when none does."""
import os
import re
import subprocess
import sys

# module folder -> project folders its files may include from
ALLOWED = {
    "base": {"base"},
    "rendezvous": {"base", "rendezvous"},
    "cluster": {"base", "rendezvous", "cluster"},
    "msrun": {"base", "rendezvous", "cluster", "msrun"},
    "comm": {"base", "comm"},
    "ps": {"base", "ps"},
    "layout": {"base", "layout"},
    "model": {"base", "comm", "layout", "model"},
    "parallel": {"base", "comm", "layout", "model", "parallel"},
    "planner": {"base", "layout", "planner"},
    "programs": {"base", "comm", "layout", "model", "parallel", "planner", "programs"},
}
# include prefixes that name a module folder other than their own: the
# launcher's private headers are "launcher/x.h" (its module root gives that
# name), so that "msrun/x.h" is always a public header
PREFIXES = {"launcher": "msrun"}
# folders outside the modules whose includes follow the same naming
OTHERS = ("tests", "bench", "examples")
# public headers (include/msrun/X.h) a module may not include
PUBLIC_FORBIDDEN = {
    "base": {"store.h", "comm.h", "parallel.h", "msrun.h", "checkpoint.h"},
    "msrun": {"comm.h", "parallel.h", "msrun.h"},
    "rendezvous": {"comm.h", "parallel.h", "msrun.h"},
    "cluster": {"comm.h", "parallel.h", "msrun.h"},
    "comm": {"parallel.h", "msrun.h"},
    "ps": {"parallel.h", "msrun.h", "checkpoint.h"},
    "model": {"msrun.h", "checkpoint.h"},
    "layout": {"store.h", "comm.h", "msrun.h", "checkpoint.h"},
    "planner": {"store.h", "comm.h", "msrun.h", "checkpoint.h"},
}
# the parameter server (ps/, issue 46) sits above comm/: the modules below
# it, and the launcher, may not use its public header
for _below in ("base", "msrun", "rendezvous", "cluster", "comm", "layout", "planner"):
    PUBLIC_FORBIDDEN[_below].add("ps.h")
# system libraries kept inside the modules that need them
SYSTEM = [
    (re.compile(r"^(ucp|uct|ucs)/"), {"comm"}, "UCX"),
    (re.compile(r"^(nccl\.h|nccl_device|cuda|cublas|cudnn)"), {"comm", "model", "parallel"},
     "CUDA/NCCL"),
    (re.compile(r"^(cblas\.h|openblas)"), {"model", "programs"}, "BLAS"),
    (re.compile(r"^grpc/"), {"rendezvous", "cluster"}, "gRPC"),
    (re.compile(r"^event2/"), {"msrun", "cluster"}, "libevent"),
    (re.compile(r"^hwloc"), {"msrun"}, "hwloc"),
    (re.compile(r"^protobuf-c/"), {"rendezvous", "cluster", "msrun"}, "protobuf-c"),
]
# Indirect crossings known and being removed: (module, the include that
# brings one in, the include it reaches) -> why. They are reported as notes, not failures, and a
# note says when one no longer occurs (then delete it here).
PENDING = {}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SOURCES = (".c", ".h", ".cu", ".cuh")
# headers generated at build time (not in the tree) and what they include
GENERATED = {
    "rendezvous/msrun.pb-c.h": [("<", "protobuf-c/protobuf-c.h")],
    "rendezvous/etcd.pb-c.h": [("<", "protobuf-c/protobuf-c.h")],
}


def includes_of(path):
    """The (line, kind, name) of every #include in path."""
    found = []
    try:
        with open(path, errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if m:
                    found.append((lineno, m.group(1), m.group(2)))
    except OSError:
        pass
    return found


def resolve(root, public, including, inc):
    """The tree's file that #include "inc" in file `including` names (a path
    relative to root), a key of GENERATED, or None (not in the tree)."""
    if inc in GENERATED:
        return inc
    parts = inc.split("/")
    if parts[0] == "msrun" and len(parts) == 2 and parts[1] in public:
        return os.path.join("include", inc)
    if parts[0] in PREFIXES:
        inc = "/".join([PREFIXES[parts[0]]] + parts[1:])
    if "/" not in inc:
        beside = os.path.join(os.path.dirname(including), inc)
        return beside if os.path.isfile(os.path.join(root, beside)) else None
    if os.path.isfile(os.path.join(root, inc)):
        return inc
    return None


def private_named_public(inc, public):
    """Why inc names a launcher's private header as "msrun/x.h", or None."""
    if "/" in inc and inc.split("/")[0] == "msrun" and inc.split("/", 1)[1] not in public:
        return (f"the launcher's own headers are included as launcher/{inc.split('/', 1)[1]} "
                f"(\"msrun/x.h\" names only the public headers of include/msrun/)")
    return None


def verdict(module, kind, inc, public):
    """Why module may not include inc, or None when it may."""
    if kind == '"':
        first = inc.split("/")[0]
        if first == "msrun" and inc.split("/", 1)[1] in public:
            if inc.split("/", 1)[1] in PUBLIC_FORBIDDEN.get(module, set()):
                return f"{module}/ may not use the public {inc}"
            return None
        if "/" not in inc:
            return None  # a file beside this one
        first = PREFIXES.get(first, first)
        if first == "msrun" and "msrun" in ALLOWED[module] and private_named_public(inc, public):
            return private_named_public(inc, public)
        if first == "tests":
            return f"{module}/ may not include tests/"
        if first in ALLOWED and first not in ALLOWED[module]:
            return f"{module}/ may not depend on {first}/"
        return None
    for pattern, owners, what in SYSTEM:
        if pattern.match(inc) and module not in owners:
            return f"{what} belongs to {', '.join(sorted(owners))}/ only"
    return None


def reached(root, public, start):
    """Every include reached from the file start (relative to root), each
    once, with the chain of headers that leads to it: (kind, inc, chain)."""
    out, seen = [], {start}
    todo = [(start, [])]
    while todo:
        path, chain = todo.pop()
        incs = ([(0, k, i) for k, i in GENERATED[path]] if path in GENERATED
                else includes_of(os.path.join(root, path)))
        for _, kind, inc in incs:
            out.append((kind, inc, chain))
            if kind != '"':
                continue
            target = resolve(root, public, path, inc)
            if target and target not in seen:
                seen.add(target)
                todo.append((target, chain + [inc]))
    return out


def check_tree(root):
    public = set()
    pubdir = os.path.join(root, "include", "msrun")
    if os.path.isdir(pubdir):
        public = set(os.listdir(pubdir))
    problems, pending_seen = [], set()
    for module in ALLOWED:
        top = os.path.join(root, module)
        for dirpath, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                for lineno, kind, inc in includes_of(os.path.join(root, rel)):
                    close = ">" if kind == "<" else kind
                    where = f"{rel}:{lineno}: #include {kind}{inc}{close}"
                    why = verdict(module, kind, inc, public)
                    if why:
                        problems.append(f"{where}: {why}")
                        continue
                    if kind != '"':
                        continue
                    # what this allowed include brings in, however deep
                    target = resolve(root, public, rel, inc)
                    if target is None:
                        continue
                    for k2, inc2, chain in reached(root, public, target):
                        why = verdict(module, k2, inc2, public)
                        if why and (module, inc, inc2) in PENDING:
                            pending_seen.add((module, inc, inc2))
                            continue
                        if why:
                            via = " -> ".join([inc] + chain + [inc2])
                            problems.append(f"{where}: through {via}: {why}")
                            break
    for key, why in PENDING.items():
        if key in pending_seen:
            print(f"check-deps: note: {key[0]}/ reaches {key[2]} through {key[1]}: {why}")
        else:
            print(f"check-deps: note: {key[0]}/ no longer reaches {key[2]} through {key[1]}: "
                  f"remove it from PENDING in scripts/check-deps.sh")
    # the launcher's private headers are never named as public ones, in the
    # tests, benchmarks and examples either; and none takes a public name
    for top in OTHERS:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                for lineno, kind, inc in includes_of(os.path.join(root, rel)):
                    why = private_named_public(inc, public) if kind == '"' else None
                    if why:
                        problems.append(f"{rel}:{lineno}: #include \"{inc}\": {why}")
    launcher = os.path.join(root, "msrun")
    if os.path.isdir(launcher):
        for name in sorted(set(os.listdir(launcher)) & public):
            problems.append(f"msrun/{name}: a private header with a public header's name "
                            f"(include/msrun/{name})")
    # public headers include only public headers
    for name in sorted(public):
        for lineno, kind, inc in includes_of(os.path.join(pubdir, name)):
            if kind == '"' and not (inc.startswith("msrun/") and inc.split("/", 1)[1] in public):
                problems.append(f"include/msrun/{name}:{lineno}: public headers include only public headers")
    return problems


def check_binaries(build):
    exe = os.path.join(build, "bin", "msrun")
    if not os.path.exists(exe):
        return [f"{exe}: not built"]
    out = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
    bad = [l.split()[0] for l in out.splitlines()
           if re.search(r"lib(ucp|uct|ucs|nccl|cuda|cudart|cublas|openblas|msrun_comm)", l)]
    problems = [f"{exe} links {b}: the launcher stays free of data-plane and GPU libraries"
                for b in bad]
    # libmsrun loads CUDA and NCCL with dlopen when a device communicator is
    # asked for: a CPU program never maps them, and the package needs no CUDA
    lib = os.path.join(build, "lib", "libmsrun.so")
    if os.path.exists(lib):
        dyn = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True).stdout
        problems += [f"{lib} needs {m}: libmsrun loads CUDA and NCCL only on demand (dlopen)"
                     for m in re.findall(r"NEEDED.*\[(lib(?:nccl|cuda|cudart|cublas)[^\]]*)\]", dyn)]
    return problems


def main(argv):
    if len(argv) >= 2 and argv[0] == "--binaries":
        problems = check_binaries(argv[1])
    else:
        problems = check_tree(argv[0] if argv else ".")
    for p in problems:
        print(p)
    if problems:
        print(f"check-deps: {len(problems)} include(s) cross the module lines of the architecture")
        return 1
    print("check-deps: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
