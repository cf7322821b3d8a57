#!/usr/bin/env python3
"""Checks the module dependency direction of docs/architecture.md section 2.

  scripts/check-deps.sh [ROOT]            checks the includes of ROOT's sources
  scripts/check-deps.sh --binaries BUILD  checks that the launcher links no
                                          data-plane or GPU library

Exits 1 and names every include that crosses a line, 0 when none does."""
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
    "comm": {"base", "rendezvous", "comm"},
    "parallel": {"base", "comm", "parallel"},
}
# public headers (include/msrun/X.h) a module may not include
PUBLIC_FORBIDDEN = {
    "base": {"store.h", "comm.h", "parallel.h", "msrun.h", "checkpoint.h"},
    "msrun": {"comm.h", "parallel.h", "msrun.h"},
    "rendezvous": {"comm.h", "parallel.h", "msrun.h"},
    "cluster": {"comm.h", "parallel.h", "msrun.h"},
    "comm": {"parallel.h", "msrun.h"},
}
# system libraries kept inside the modules that need them
SYSTEM = [
    (re.compile(r"^(ucp|uct|ucs)/"), {"comm"}, "UCX"),
    (re.compile(r"^(nccl\.h|nccl_device|cuda|cublas|cudnn)"), {"comm", "parallel"}, "CUDA/NCCL"),
    (re.compile(r"^(cblas\.h|openblas)"), {"parallel"}, "BLAS"),
    (re.compile(r"^grpc/"), {"rendezvous", "cluster"}, "gRPC"),
    (re.compile(r"^event2/"), {"msrun"}, "libevent"),
    (re.compile(r"^protobuf-c/"), {"rendezvous", "cluster", "msrun"}, "protobuf-c"),
]
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SOURCES = (".c", ".h", ".cu", ".cuh")


def check_tree(root):
    public = set()
    pubdir = os.path.join(root, "include", "msrun")
    if os.path.isdir(pubdir):
        public = set(os.listdir(pubdir))
    problems = []
    for module in ALLOWED:
        top = os.path.join(root, module)
        for dirpath, _, files in os.walk(top):
            for name in files:
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        kind, inc = m.groups()
                        where = f"{rel}:{lineno}: #include {kind}{inc}{'>' if kind == '<' else kind}"
                        if kind == '"':
                            first = inc.split("/")[0]
                            if first == "msrun" and inc.split("/", 1)[1] in public:
                                if inc.split("/", 1)[1] in PUBLIC_FORBIDDEN.get(module, set()):
                                    problems.append(f"{where}: {module}/ may not use the public {inc}")
                                continue
                            if "/" not in inc:
                                continue  # a file beside this one
                            if first == "tests" or first not in ALLOWED:
                                if first == "tests":
                                    problems.append(f"{where}: {module}/ may not include tests/")
                                continue
                            if first not in ALLOWED[module]:
                                problems.append(f"{where}: {module}/ may not depend on {first}/")
                        else:
                            for pattern, owners, what in SYSTEM:
                                if pattern.match(inc) and module not in owners:
                                    problems.append(f"{where}: {what} belongs to {', '.join(sorted(owners))}/ only")
    # public headers include only public headers
    for name in sorted(public):
        path = os.path.join(pubdir, name)
        with open(path, errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if m and m.group(1) == '"' and not (m.group(2).startswith("msrun/") and
                                                    m.group(2).split("/", 1)[1] in public):
                    problems.append(f"include/msrun/{name}:{lineno}: public headers include only public headers")
    return problems


def check_binaries(build):
    exe = os.path.join(build, "bin", "msrun")
    if not os.path.exists(exe):
        return [f"{exe}: not built"]
    out = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
    bad = [l.split()[0] for l in out.splitlines()
           if re.search(r"lib(ucp|uct|ucs|nccl|cuda|cudart|cublas|openblas|msrun_comm)", l)]
    return [f"{exe} links {b}: the launcher stays free of data-plane and GPU libraries" for b in bad]


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
