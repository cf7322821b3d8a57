#!/usr/bin/python3
"""Counts the sizes issues 37 and 44 track in a tree's product code.

  scripts/count_sizes.py [--list] [ROOT]

ROOT (default: this checkout) is a checkout of any commit (a `git worktree
add` of an old one works). The product code is the C and CUDA sources
(.c .h .cu .cuh) of the module folders (base rendezvous cluster msrun comm
layout model parallel planner programs, those that exist at that commit);
tests, benchmarks, examples and scripts are not counted. Prints the files
over 700 lines and the functions over 80 and over 100 lines (a function's
lines run from the first line of its definition to its closing brace, as
libclang's extent says; libclang is Debian's python3-clang, as
scripts/mutagen.py uses). Then the same for the Python package (the .py
files under python/, issue 44), on lines of its own that begin with
"python": a function's (or method's) lines run from its def to its last
line, as Python's ast says. And for the torch.distributed backend's thin
C++ layer (the .cpp and .hpp files under python/c10d, issue 44), on lines
that begin with "c++", counted as the C sources are (constructors,
destructors, methods and templates included). --list names each file and
function counted.
Exits 0, or 2 when libclang is missing or a file cannot be parsed at all."""
import argparse
import ast
import os
import sys
import tempfile

MODULES = ("base", "rendezvous", "cluster", "msrun", "comm", "layout", "model", "parallel",
           "planner", "programs")
EXTS = (".c", ".h", ".cu", ".cuh")
FILE_MAX = 700
FUNC_LIMITS = (80, 100)
PY_DIR = "python"
CXX_DIRS = ("python/c10d",)
CXX_EXTS = (".cpp", ".hpp", ".cc", ".hh")
CUDA_INCLUDE = "/usr/local/cuda/include"


def sources(root):
    """The product sources under root, as paths relative to it, sorted."""
    out = []
    for m in MODULES:
        top = os.path.join(root, m)
        for d, _, files in os.walk(top):
            for f in files:
                if f.endswith(EXTS):
                    out.append(os.path.relpath(os.path.join(d, f), root))
    return sorted(out)


def parse_args(root, shim, path):
    """Compiler arguments good enough for libclang to find the functions:
    the module roots (the launcher's private headers are "launcher/x.h",
    which shim maps to msrun/), the public headers, and CUDA's for .cu."""
    args = ["-I" + root, "-I" + os.path.join(root, "include"), "-I" + shim,
            "-I" + os.path.join(root, "msrun"), "-DMSR_HAVE_CUDA_TRAIN=1"]
    if path.endswith((".cu", ".cuh")):
        return ["-x", "cuda", "--cuda-host-only", "-nocudainc", "-nocudalib",
                "-I" + CUDA_INCLUDE] + args
    if path.endswith(CXX_EXTS):
        return ["-x", "c++", "-std=c++17"] + args
    if path.endswith(".h"):
        return ["-x", "c", "-std=c11"] + args
    return ["-std=c11"] + args


def functions(ci, index, root, shim, path):
    """(name, lines) of every function defined in path itself (for C++
    also methods, constructors, destructors and templates, inside any
    namespace or class of path's own)."""
    full = os.path.realpath(os.path.join(root, path))
    tu = index.parse(full, args=parse_args(root, shim, path),
                     options=ci.TranslationUnit.PARSE_INCOMPLETE)
    kinds = (ci.CursorKind.FUNCTION_DECL, ci.CursorKind.CXX_METHOD,
             ci.CursorKind.CONSTRUCTOR, ci.CursorKind.DESTRUCTOR,
             ci.CursorKind.FUNCTION_TEMPLATE, ci.CursorKind.CONVERSION_FUNCTION)
    out = []

    def walk(cursor):
        # only what path itself holds: the included headers' trees (all of
        # libtorch's for the C++ layer) are not walked
        for c in cursor.get_children():
            if c.location.file is None or os.path.realpath(c.location.file.name) != full:
                continue
            if c.kind in kinds and c.is_definition():
                out.append((c.spelling, c.extent.end.line - c.extent.start.line + 1))
            else:
                walk(c)

    walk(tu.cursor)
    return out


def cxx_sources(root):
    """The C++ layer's sources under root, relative, sorted."""
    out = []
    for top in CXX_DIRS:
        for d, _, files in os.walk(os.path.join(root, top)):
            out += [os.path.relpath(os.path.join(d, f), root) for f in files
                    if f.endswith(CXX_EXTS)]
    return sorted(out)


def py_sources(root):
    """The Python package's sources under root (python/), relative, sorted."""
    out = []
    for d, dirs, files in os.walk(os.path.join(root, PY_DIR)):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        out += [os.path.relpath(os.path.join(d, f), root) for f in files if f.endswith(".py")]
    return sorted(out)


def py_functions(text, path):
    """(name, lines) of every function and method defined in a Python
    source; methods and nested functions named Outer.name."""
    out = []

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    out.append((name, child.end_lineno - child.lineno + 1))
                walk(child, name + ".")
            else:
                walk(child, prefix)

    walk(ast.parse(text, filename=path), "")
    return out


def report(prefix, nfiles, nfuncs, big, long_fn, listing):
    """The counts' lines (prefix "" for C, "c++ " for the C++ layer,
    "python " for Python)."""
    print("%s%d files, %d functions defined in them" % (prefix, nfiles, nfuncs))
    print("%sfiles over %d lines: %d" % (prefix, FILE_MAX, len(big)))
    if listing:
        for n, path in sorted(big, reverse=True):
            print("  %5d %s" % (n, path))
    for lim in FUNC_LIMITS:
        print("%sfunctions over %d lines: %d" % (prefix, lim, len(long_fn[lim])))
        if listing:
            for n, what in sorted(long_fn[lim], reverse=True):
                print("  %5d %s" % (n, what))


def count_python(root, listing):
    """The Python package's counts; False when a file is not Python."""
    big, long_fn = [], {n: [] for n in FUNC_LIMITS}
    paths = py_sources(root)
    nfuncs = 0
    for path in paths:
        with open(os.path.join(root, path), "rb") as f:
            text = f.read()
        if text.count(b"\n") > FILE_MAX:
            big.append((text.count(b"\n"), path))
        try:
            fns = py_functions(text, path)
        except (SyntaxError, ValueError) as e:
            print("count_sizes: %s: %s" % (path, e), file=sys.stderr)
            return False
        nfuncs += len(fns)
        for name, n in fns:
            for lim in FUNC_LIMITS:
                if n > lim:
                    long_fn[lim].append((n, "%s:%s" % (path, name)))
    report("python ", len(paths), nfuncs, big, long_fn, listing)
    return True


def count_c(ci, index, root, shim, paths, prefix, listing):
    """The counts of C (or C++) sources; False when one cannot be parsed."""
    big, long_fn = [], {n: [] for n in FUNC_LIMITS}
    nfuncs = 0
    for path in paths:
        with open(os.path.join(root, path), "rb") as f:
            lines = f.read().count(b"\n")
        if lines > FILE_MAX:
            big.append((lines, path))
        try:
            fns = functions(ci, index, root, shim, path)
        except ci.TranslationUnitLoadError as e:
            print("count_sizes: %s: %s" % (path, e), file=sys.stderr)
            return False
        nfuncs += len(fns)
        for name, n in fns:
            for lim in FUNC_LIMITS:
                if n > lim:
                    long_fn[lim].append((n, "%s:%s" % (path, name)))
    report(prefix, len(paths), nfuncs, big, long_fn, listing)
    return True


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("root", nargs="?", default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    p.add_argument("--list", action="store_true", help="name every file and function counted")
    a = p.parse_args()
    try:
        import clang.cindex as ci
    except ImportError:
        print("count_sizes: python3-clang (clang.cindex) is not installed", file=sys.stderr)
        return 2
    root = os.path.abspath(a.root)
    index = ci.Index.create()
    with tempfile.TemporaryDirectory() as shim:
        os.symlink(os.path.join(root, "msrun"), os.path.join(shim, "launcher"))
        for prefix, paths in (("", sources(root)), ("c++ ", cxx_sources(root))):
            if not count_c(ci, index, root, shim, paths, prefix, a.list):
                return 2
    if not count_python(root, a.list):
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
