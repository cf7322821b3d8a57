#!/usr/bin/python3
"""Mutation testing by operator: generates mutants at every applicable site
of chosen C files, runs the tests that cover each file against each mutant,
and prints the score per file with the survivors.

Sites are found in the AST that libclang (Debian's python3-clang) builds
with the project's own compile flags (the build directory's
compile_commands.json), so code the build leaves out (#if 0, the CUDA parts
when CUDA is off) has no sites, and headers have none: only the file's own
bytes are mutated, at the exact token extents libclang reports. Sites in
the arguments of logging and error-message calls (MSR_LOG and its levels,
msr_err*, fprintf(stderr, ...), ...) are skipped: a changed message is not a bug the
tests are meant to catch.

Operators (--operators, comma separated; default all):
  relational  < <= > >=: to the boundary neighbour (< to <=) and the negation
              (< to >=)
  equality    == to != and back
  logical     && to || and back
  off_by_one  x + 1 / x - 1: the sign flipped, or the "+ 1" dropped
  not         a logical ! dropped
  return      an error return (a negative constant, MSR_ERR_*, or
              msr_err(...)) removed (not a function's last statement: that
              cannot compile), or made "return 0"
  constant    an integer literal changed: 0 to 1, 1 to 0, n to n+1 (not the
              size of an array declared: one byte more is nearly always
              equivalent)

For each mutant: the file is written, the build brought up to date (the
targets the map names, else the whole build directory), the mapped tests run
with ctest (--timeout per test), and the file restored byte for byte, also
on an exception or Ctrl-C/SIGTERM. A copy of each file under mutation is
kept in BUILD/mutagen/ while it runs; a run killed outright (SIGKILL) leaves
it there and the next run restores it first. A mutant that does not build
is "did not build": neither caught nor survived. A test that runs past its
timeout counts as caught (it did not pass) and is shown as a timeout.

The map (default scripts/mutagen_tests.txt) gives each file its ctest regex
and, optionally, the build targets those tests need. The equivalent list
(default scripts/mutagen_equivalent.txt) names mutants that cannot change
behaviour, as "file:line[:col] operator[:replacement] why" (an empty
replacement: the mutant that removes); they are skipped and listed.

Exit status: 0 when the score is at least --goal; 1 below it, or when a
baseline test fails; 2 on bad usage or a file that cannot be parsed; 130
when interrupted (the partial report is printed).
"""
import argparse
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time

try:
    import clang.cindex as ci
except ImportError:
    sys.exit("mutagen: needs libclang's Python bindings (Debian: python3-clang)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPERATORS = ("relational", "equality", "logical", "off_by_one", "not", "return", "constant")
REL_SWAPS = {"<": ("<=", ">="), "<=": ("<", ">"), ">": (">=", "<="), ">=": (">", "<")}
# Calls whose arguments are a message: sites inside them are not mutated.
MESSAGE_CALLS = re.compile(
    r"^(msr_log_write|msr_err|msr_err_set|msr_err_msg|msr_err_msg_or|msr_err_prefix|"
    r"msr_err_call|msr_opts_print_error|perror)$")
# ... and these when they write to stderr (first argument "stderr")
STDERR_CALLS = re.compile(r"^(fprintf|vfprintf|fputs)$")
MESSAGE_MACROS = re.compile(r"^MSR_(LOG|ERROR|WARN|INFO|DEBUG|TRACE)$")


class Mutant:
    """One mutation: bytes [start, end) of the file replaced by text."""

    def __init__(self, path, line, col, op, start, end, orig, text):
        self.path, self.line, self.col, self.op = path, line, col, op
        self.start, self.end, self.orig, self.text = start, end, orig, text
        self.result, self.seconds, self.why = None, 0.0, ""

    def name(self):
        orig = " ".join(self.orig.split())
        if len(orig) > 48:
            orig = orig[:40] + " ... " + orig[-3:]
        shown = self.text if self.text else "(removed)"
        return "%s:%d:%d: %s: %s -> %s" % (self.path, self.line, self.col, self.op, orig, shown)


# ---------------------------------------------------------------- parsing

def compile_args(build, path):
    """The flags the build compiles path with, as clang arguments."""
    db = os.path.join(build, "compile_commands.json")
    try:
        with open(db) as f:
            entries = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit("mutagen: cannot read %s: %s (configure the build first; "
                         "the top CMakeLists exports it)" % (db, e))
    full = os.path.realpath(os.path.join(ROOT, path))
    for e in entries:
        src = os.path.realpath(os.path.join(e.get("directory", ""), e["file"]))
        if src != full:
            continue
        argv = e.get("arguments") or shlex.split(e["command"])
        out, skip = [], False
        for a in argv[1:]:
            if skip:
                skip = False
            elif a in ("-o", "-MF", "-MT", "-MQ"):
                skip = True
            elif a in ("-c", "-MD", "-MMD") or os.path.realpath(
                    os.path.join(e.get("directory", ""), a)) == full:
                continue
            else:
                out.append(a)
        return out, e.get("directory", build)
    raise SystemExit("mutagen: %s is not compiled by the build in %s" % (path, build))


def parse(build, path):
    args, cwd = compile_args(build, path)
    old = os.getcwd()
    os.chdir(cwd)  # relative -I paths are relative to the compile's directory
    try:
        tu = ci.Index.create().parse(
            os.path.join(ROOT, path), args=args,
            options=ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD)
    except ci.TranslationUnitLoadError as e:
        raise SystemExit("mutagen: libclang cannot parse %s: %s" % (path, e))
    finally:
        os.chdir(old)
    errors = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if errors:
        for d in errors[:5]:
            print("mutagen: %s: %s" % (path, d), file=sys.stderr)
        raise SystemExit("mutagen: %s does not parse cleanly with the build's flags" % path)
    return tu


def in_file(cursor, full):
    f = cursor.extent.start.file
    return f is not None and os.path.realpath(f.name) == full


class SiteFinder:
    """Walks one file's AST and collects its mutants."""

    def __init__(self, path, tu, data, operators):
        self.path, self.tu, self.data, self.ops = path, tu, data, operators
        self.full = os.path.realpath(os.path.join(ROOT, path))
        self.mutants, self.seen, self.ones, self.tail_returns = [], set(), set(), set()
        self.quiet = []  # byte ranges of message macros (MSR_LOG(...))
        for c in tu.cursor.get_children():
            if (c.kind == ci.CursorKind.MACRO_INSTANTIATION and in_file(c, self.full)
                    and MESSAGE_MACROS.match(c.spelling)):
                self.quiet.append((c.extent.start.offset, c.extent.end.offset))

    def add(self, op, start, end, text):
        orig = self.data[start:end].decode()
        if (op, start, end, text) in self.seen or any(a <= start < b for a, b in self.quiet):
            return
        self.seen.add((op, start, end, text))
        line = self.data.count(b"\n", 0, start) + 1
        col = start - (self.data.rfind(b"\n", 0, start) + 1) + 1
        self.mutants.append(Mutant(self.path, line, col, op, start, end, orig, text))

    def token_at(self, tok, want):
        """tok's byte range when the file really holds want there (not a
        token that a macro expansion maps back onto its invocation)."""
        s, e = tok.extent.start.offset, tok.extent.end.offset
        if tok.location.file is None or os.path.realpath(tok.location.file.name) != self.full:
            return None
        return (s, e) if self.data[s:e] == want.encode() else None

    def walk(self, cursor, in_message=False):
        for c in cursor.get_children():
            if not in_file(c, self.full):
                continue
            msg = in_message
            if c.kind == ci.CursorKind.CALL_EXPR and is_message(c):
                msg = True
                if c.spelling.startswith("msr_err"):
                    # the status (first argument) is code, the rest a message
                    args = list(c.get_arguments())
                    if args:
                        self.visit(args[0], in_message)
                        self.walk(args[0], in_message)
            if c.kind == ci.CursorKind.COMPOUND_STMT and cursor.kind == ci.CursorKind.FUNCTION_DECL:
                body = list(c.get_children())
                if body and body[-1].kind == ci.CursorKind.RETURN_STMT:
                    # a function's last return removed only fails -Werror=return-type
                    self.tail_returns.add(body[-1].extent.start.offset)
            if not msg and not self.array_size(cursor, c):
                self.visit(c, in_message)
            self.walk(c, msg)

    def array_size(self, parent, c):
        """Whether c is the size in a declaration's "[n]": a buffer made one
        larger is nearly always an equivalent mutant."""
        if (parent.kind not in (ci.CursorKind.VAR_DECL, ci.CursorKind.FIELD_DECL)
                or c.kind != ci.CursorKind.INTEGER_LITERAL):
            return False
        before = self.data[:c.extent.start.offset].rstrip()
        return before.endswith(b"[") and self.data[c.extent.end.offset:].lstrip()[:1] == b"]"

    def visit(self, c, in_message):
        if in_message:
            return
        k = c.kind
        if k == ci.CursorKind.BINARY_OPERATOR:
            self.binary(c)
        elif k == ci.CursorKind.UNARY_OPERATOR and "not" in self.ops:
            toks = list(c.get_tokens())
            if toks and toks[0].spelling == "!":
                r = self.token_at(toks[0], "!")
                if r:
                    self.add("not", r[0], r[1], "")
        elif k == ci.CursorKind.RETURN_STMT and "return" in self.ops:
            self.ret(c)
        elif k == ci.CursorKind.INTEGER_LITERAL and "constant" in self.ops:
            self.constant(c)

    def binary(self, c):
        kids = list(c.get_children())
        if len(kids) != 2:
            return
        lhs, rhs = kids
        lo, hi = lhs.extent.end.offset, rhs.extent.start.offset
        if not (in_file(lhs, self.full) and in_file(rhs, self.full)) or lo > hi:
            return
        op = None
        for t in c.get_tokens():
            if lo <= t.extent.start.offset and t.extent.end.offset <= hi:
                op = t
                break
        if op is None:
            return
        r = self.token_at(op, op.spelling)
        if not r:
            return
        s = op.spelling
        if s in REL_SWAPS and "relational" in self.ops:
            for repl in REL_SWAPS[s]:
                self.add("relational", r[0], r[1], repl)
        elif s in ("==", "!=") and "equality" in self.ops:
            self.add("equality", r[0], r[1], "!=" if s == "==" else "==")
        elif s in ("&&", "||") and "logical" in self.ops:
            self.add("logical", r[0], r[1], "||" if s == "&&" else "&&")
        elif s in ("+", "-") and "off_by_one" in self.ops:
            one = rhs if is_one(rhs) else (lhs if s == "+" and is_one(lhs) else None)
            if one is None:
                return
            self.ones.add(one.extent.start.offset)
            self.add("off_by_one", r[0], r[1], "-" if s == "+" else "+")
            if one is rhs:  # "x + 1" -> "x"
                self.add("off_by_one", r[0], rhs.extent.end.offset, "")
            else:  # "1 + x" -> "x"
                self.add("off_by_one", lhs.extent.start.offset, rhs.extent.start.offset, "")

    def ret(self, c):
        kids = list(c.get_children())
        if len(kids) != 1:
            return
        text = self.data[kids[0].extent.start.offset:kids[0].extent.end.offset].decode()
        if not re.match(r"^(\(?\s*-\s*\d+\s*\)?|MSR_ERR_\w+|msr_err\w*\(\s*MSR_ERR_[\s\S]*)$",
                        text.strip()):
            return
        s, e = c.extent.start.offset, c.extent.end.offset
        if self.data[s:s + 6] != b"return":
            return
        end = e
        while end < len(self.data) and self.data[end:end + 1] in (b" ", b"\t"):
            end += 1
        if self.data[end:end + 1] == b";":
            if s not in self.tail_returns:
                self.add("return", s, end + 1, "{}")
            self.add("return", s, end + 1, "return 0;")

    def constant(self, c):
        toks = list(c.get_tokens())
        if len(toks) != 1:
            return
        r = self.token_at(toks[0], toks[0].spelling)
        if not r:
            return
        m = re.match(r"^(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)([uUlL]*)$", toks[0].spelling)
        if not m:
            return
        digits, suffix = m.groups()
        if toks[0].extent.start.offset in self.ones:
            return  # the 1 of an off_by_one site: 1 -> 0 would repeat "dropped"
        base = 16 if digits[:2].lower() == "0x" else (8 if len(digits) > 1 and digits[0] == "0"
                                                      else 10)
        n = int(digits, base)
        new = 1 if n == 0 else (0 if n == 1 else n + 1)
        shown = {16: "0x%x", 8: "0%o", 10: "%d"}[base] % new
        self.add("constant", r[0], r[1], shown + suffix)


def is_message(call):
    name = call.spelling or ""
    if MESSAGE_CALLS.match(name):
        return True
    if not STDERR_CALLS.match(name):
        return False
    args = list(call.get_arguments())
    first = args[0] if name != "fputs" else (args[1] if len(args) > 1 else None)
    # stderr is a macro: its tokens map back to nothing, its spelling stays
    return first is not None and (first.spelling == "stderr" or
                                  [t.spelling for t in first.get_tokens()] == ["stderr"])


def is_one(cursor):
    # an implicit conversion (1 to size_t) wraps the literal in an unexposed node
    while cursor.kind == ci.CursorKind.UNEXPOSED_EXPR:
        kids = list(cursor.get_children())
        if len(kids) != 1:
            return False
        cursor = kids[0]
    if cursor.kind != ci.CursorKind.INTEGER_LITERAL:
        return False
    toks = list(cursor.get_tokens())
    return len(toks) == 1 and re.match(r"^1[uUlL]*$", toks[0].spelling) is not None


def find_mutants(build, path, operators):
    with open(os.path.join(ROOT, path), "rb") as f:
        data = f.read()
    finder = SiteFinder(path, parse(build, path), data, operators)
    finder.walk(finder.tu.cursor)
    finder.mutants.sort(key=lambda m: (m.start, m.op, m.text))
    return finder.mutants


# ---------------------------------------------------------------- map, lists

def read_map(path):
    """file -> (ctest regex, [targets]) from lines "file regex [t1,t2]"."""
    out = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) not in (2, 3):
                raise SystemExit("mutagen: %s:%d: want 'file regex [targets]'" % (path, n))
            out[parts[0]] = (parts[1], parts[2].split(",") if len(parts) == 3 else [])
    return out


def read_equivalent(path):
    """[(file, line, col, operator, replacement, why)] from lines
    "file:line[:col] operator[:replacement] why" (col and replacement None
    when not given: they then match any)."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = re.match(r"^(\S+?):(\d+)(?::(\d+))?\s+(\w+)(?::(\S*))?\s+(.+)$", line)
            if not m or m.group(4) not in OPERATORS:
                raise SystemExit("mutagen: %s:%d: want 'file:line[:col] operator[:replacement] "
                                 "why'" % (path, n))
            col = int(m.group(3)) if m.group(3) else None
            out.append((m.group(1), int(m.group(2)), col, m.group(4), m.group(5), m.group(6)))
    return out


def equivalent_reason(m, equivalent, used):
    """The reason of the first entry that names m (its index added to
    used), or None."""
    for i, (f, line, col, op, repl, why) in enumerate(equivalent):
        if (f == m.path and line == m.line and op == m.op and col in (None, m.col)
                and repl in (None, m.text)):
            used.add(i)
            return why
    return None


def warn_stale(path, equivalent, used, files):
    """Says which entries of the equivalent list name a file that was read
    but match none of its mutants: the code moved under them (or the
    mutant is gone), and the mutant they meant is run again."""
    for i, (f, line, col, op, repl, _) in enumerate(equivalent):
        if i not in used and f in files:
            site = "%s:%d%s %s%s" % (f, line, ":%d" % col if col else "", op,
                                     ":" + repl if repl is not None else "")
            print("mutagen: %s: %s matches no mutant: moved or gone (keep the list with the code)"
                  % (path, site), file=sys.stderr)


def sample(by_file, n, seed):
    """n mutants drawn at random, spread over the files in proportion to
    their counts (largest remainder), each file's share drawn with seed."""
    total = sum(len(v) for v in by_file.values())
    if n >= total:
        return by_file
    rng = random.Random(seed)
    quota = {f: n * len(v) / total for f, v in by_file.items()}
    share = {f: int(q) for f, q in quota.items()}
    rest = sorted(by_file, key=lambda f: (share[f] - quota[f], f))
    for f in rest[:n - sum(share.values())]:
        share[f] += 1
    out = {}
    for f in sorted(by_file):
        picked = rng.sample(range(len(by_file[f])), share[f])
        out[f] = [by_file[f][i] for i in sorted(picked)]
    return out


NAME_RE = re.compile(r"(\S+\.c:\d+:\d+: [a-z_]+: .* -> .*?)(\s+\[equivalent:.*)?$")


def only(by_file, path, skipped=()):
    """The mutants named in the file at path (lines as a run prints them;
    blank lines and # comments skipped), or None after naming those that
    match no site (the code moved since: rerun on the commit that run
    used). A name of a mutant listed as equivalent is skipped, and said."""
    want = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = NAME_RE.search(line)
            if m is None:
                print("mutagen: %s: not a mutant's name: %s" % (path, line), file=sys.stderr)
                return None
            want.append(m.group(1).strip())
    have = {m.name(): m for ms in by_file.values() for m in ms}
    equivalent = {m.name() for m in skipped}
    for w in [w for w in want if w in equivalent]:
        print("mutagen: %s: skipped, listed as equivalent: %s" % (path, w))
    want = [w for w in want if w not in equivalent]
    lost = [w for w in want if w not in have]
    for w in lost:
        print("mutagen: %s: no such mutant here: %s" % (path, w), file=sys.stderr)
    if lost or not want:
        if not want:
            print("mutagen: %s names no mutant" % path, file=sys.stderr)
        return None
    out = {f: [] for f in by_file}
    for w in dict.fromkeys(want):
        out[have[w].path].append(have[w])
    return {f: ms for f, ms in out.items() if ms}


# ---------------------------------------------------------------- running

class Interrupted(Exception):
    pass


def on_signal(signum, _frame):
    raise Interrupted("signal %d" % signum)


def run(cmd, timeout, log):
    """Runs cmd in its own process group (killed whole on a timeout or an
    interruption); returns (rc or None on timeout, seconds)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        p.wait(timeout=timeout)
        return p.returncode, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - t0
    finally:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


class Runner:
    def __init__(self, args, tests):
        self.a, self.tests = args, tests
        self.keep = os.path.join(args.build, "mutagen")
        os.makedirs(self.keep, exist_ok=True)
        self.log = open(os.path.join(self.keep, "log.txt"), "w")

    def backup_path(self, path):
        return os.path.join(self.keep, path.replace("/", "%") + ".orig")

    def build(self, targets):
        cmd = ["cmake", "--build", self.a.build, "-j", str(self.a.jobs)]
        for t in targets:
            cmd += ["--target", t]
        return run(cmd, self.a.build_timeout, self.log)

    def ctest(self, regex):
        cmd = ["ctest", "--test-dir", self.a.build, "-R", regex, "--no-tests=error",
               "--timeout", str(self.a.timeout), "-j", str(self.a.jobs)]
        if not self.a.all_tests:
            cmd.append("--stop-on-failure")
        self.log.write("$ %s\n" % " ".join(cmd))
        self.log.flush()
        start = self.log.tell()
        rc, secs = run(cmd, self.a.timeout * 20 + 60, self.log)
        self.log.flush()
        with open(self.log.name, "rb") as f:
            f.seek(start)
            out = f.read().decode(errors="replace")
        timed_out = rc is None or "***Timeout" in out
        return rc, timed_out, secs

    def baseline(self, files):
        ok = True
        for path in files:
            regex, targets = self.tests[path]
            rc, _ = self.build(targets)
            if rc != 0:
                print("mutagen: the unmutated build fails (see %s)" % self.log.name)
                return False
            rc, _, secs = self.ctest(regex)
            print("baseline %-28s %-44s %s (%.1f s)" % (path, regex, "ok" if rc == 0 else "FAILS",
                                                      secs))
            ok &= rc == 0
        return ok

    def one(self, m, original):
        regex, targets = self.tests[m.path]
        full = os.path.join(ROOT, m.path)
        t0 = time.monotonic()
        self.log.write("\n=== %s\n" % m.name())
        try:
            write(full, original[:m.start] + m.text.encode() + original[m.end:])
            rc, _ = self.build(targets)
            if rc != 0:
                m.result = "did not build"
            else:
                rc, timed_out, _ = self.ctest(regex)
                m.result = "timeout" if timed_out else ("survived" if rc == 0 else "caught")
        finally:
            write(full, original)
        m.seconds = time.monotonic() - t0

    def mutate_file(self, path, mutants):
        full = os.path.join(ROOT, path)
        with open(full, "rb") as f:
            original = f.read()
        backup = self.backup_path(path)
        write(backup, original)
        try:
            for m in mutants:
                self.one(m, original)
                print("%-14s %5.1f s  %s" % (m.result, m.seconds, m.name()), flush=True)
        finally:
            write(full, original)
            os.unlink(backup)


def restore_leftovers(build):
    """A run killed outright (SIGKILL) left a file mutated, its copy in
    BUILD/mutagen/: put it back before anything reads the file."""
    keep = os.path.join(build, "mutagen")
    for name in sorted(os.listdir(keep)) if os.path.isdir(keep) else []:
        if name.endswith(".orig"):
            path = name[:-len(".orig")].replace("%", "/")
            with open(os.path.join(keep, name), "rb") as f:
                write(os.path.join(ROOT, path), f.read())
            os.unlink(os.path.join(keep, name))
            print("mutagen: restored %s, left mutated by a run that was killed" % path)


def write(path, data):
    """Writes data to path whole (a temporary file renamed over it, the
    file's mode kept), with Ctrl-C and SIGTERM held off meanwhile so that a
    restore is never cut in half."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        tmp = path + ".mutagen-tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        if os.path.exists(path):
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


# ---------------------------------------------------------------- report, main

def report(by_file, skipped, goal):
    """Prints the table and the survivors; returns the total score."""
    cols = ("mutants", "caught", "timeout", "survived", "no build", "score", "s/mutant")
    print("\n%-28s %8s %7s %8s %9s %9s %6s %9s" % (("file",) + cols))
    tot, secs = [0, 0, 0, 0, 0], 0.0
    for path in sorted(by_file):
        ms = by_file[path]
        c = [len(ms)] + [sum(m.result == r for m in ms)
                         for r in ("caught", "timeout", "survived", "did not build")]
        tot = [a + b for a, b in zip(tot, c)]
        secs += sum(m.seconds for m in ms)
        print("%-28s %8d %7d %8d %9d %9d %6s %9s" % ((path,) + tuple(c) + (pct(c), per(ms))))
    print("%-28s %8d %7d %8d %9d %9d %6s %9s" % (("total",) + tuple(tot) + (pct(tot), per(
        [m for p in by_file for m in by_file[p]]))))
    survivors = [m for p in sorted(by_file) for m in by_file[p] if m.result == "survived"]
    if survivors:
        print("\nsurvivors:")
        for m in survivors:
            print("  " + m.name())
    if skipped:
        print("\nequivalent (skipped, not counted):")
        for m in skipped:
            print("  %s  (%s)" % (m.name(), m.why))
    if secs:
        print("\ntime: %.0f s for %d mutants" % (secs, tot[0]))
    score = score_of(tot)
    print("score: %s (goal %d%%)" % (pct(tot), goal))
    return score


def per(mutants):
    return "%.1f" % (sum(m.seconds for m in mutants) / len(mutants)) if mutants else "-"


def score_of(c):
    counted = c[1] + c[2] + c[3]
    return 100.0 * (c[1] + c[2]) / counted if counted else 100.0


def pct(c):
    return "%.0f%%" % score_of(c) if c[1] + c[2] + c[3] else "-"


def list_sites(by_file, operators):
    print("%-28s %6s " % ("file", "sites") + " ".join("%10s" % o for o in operators))
    tot = {o: 0 for o in operators}
    for path in sorted(by_file):
        count = {o: sum(m.op == o for m in by_file[path]) for o in operators}
        for o in operators:
            tot[o] += count[o]
        print("%-28s %6d " % (path, len(by_file[path])) +
              " ".join("%10d" % count[o] for o in operators))
    print("%-28s %6d " % ("total", sum(tot.values())) +
          " ".join("%10d" % tot[o] for o in operators))


def options():
    p = argparse.ArgumentParser(
        prog="mutagen.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__,
        epilog="See docs/testing.md, section 'Mutation testing by operator'.")
    p.add_argument("--files", nargs="+", metavar="FILE",
                   help="files to mutate, relative to the source root (default: all in the map)")
    p.add_argument("--operators", default=",".join(OPERATORS),
                   help="comma-separated operators (default: all): " + ", ".join(OPERATORS))
    p.add_argument("--sample", type=int, metavar="N",
                   help="run N mutants drawn at random, spread over the files in proportion")
    p.add_argument("--seed", type=int, default=1, help="the sample's seed (default 1)")
    p.add_argument("--only", metavar="FILE",
                   help="run only the mutants named in FILE, one a line, as a run prints them "
                        "(a report's survivor lines will do: e.g. to rerun the survivors after "
                        "adding tests); a name that matches no site is an error")
    p.add_argument("--build", default="build", metavar="DIR",
                   help="a configured build directory (default: build)")
    p.add_argument("--timeout", type=int, default=120, metavar="S",
                   help="ctest's limit per test, seconds (default 120)")
    p.add_argument("--build-timeout", type=int, default=1800, metavar="S",
                   help="limit on one incremental build, seconds (default 1800)")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="parallel jobs for the build and ctest (default 1); mutants run "
                        "one at a time, since they share the working tree")
    p.add_argument("--list", action="store_true", help="print the sites and counts; run nothing")
    p.add_argument("--map", default=os.path.join(ROOT, "scripts", "mutagen_tests.txt"),
                   help="file to ctest regex map (default scripts/mutagen_tests.txt)")
    p.add_argument("--equivalent",
                   default=os.path.join(ROOT, "scripts", "mutagen_equivalent.txt"),
                   help="mutants known to be equivalent (default scripts/mutagen_equivalent.txt)")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip running each file's tests once unmutated first")
    p.add_argument("--all-tests", action="store_true",
                   help="run every mapped test per mutant (default: stop at the first failure)")
    p.add_argument("--goal", type=float, default=80, metavar="PCT",
                   help="exit 1 when the score is below PCT (default 80)")
    a = p.parse_args()
    a.operators = [o.strip() for o in a.operators.split(",") if o.strip()]
    bad = [o for o in a.operators if o not in OPERATORS]
    if bad or not a.operators:
        p.error("unknown operator(s) %s; known: %s" % (",".join(bad), ", ".join(OPERATORS)))
    if a.jobs < 1 or a.timeout < 1 or (a.sample is not None and a.sample < 1):
        p.error("--jobs, --timeout and --sample take a positive number")
    a.build = os.path.abspath(a.build)
    return a


def main():
    a = options()
    tests = read_map(a.map)
    files = a.files or sorted(tests)
    missing = [f for f in files if f not in tests]
    if missing:
        print("mutagen: no tests mapped for %s (add them to %s)" % (", ".join(missing), a.map),
              file=sys.stderr)
        return 2
    equivalent = read_equivalent(a.equivalent)
    restore_leftovers(a.build)
    by_file, skipped, used = {}, [], set()
    for path in files:
        by_file[path] = []
        for m in find_mutants(a.build, path, a.operators):
            m.why = equivalent_reason(m, equivalent, used)
            (skipped if m.why else by_file[path]).append(m)
    warn_stale(a.equivalent, equivalent, used, files)
    if a.list:
        for path in sorted(by_file):
            for m in by_file[path]:
                print(m.name())
        for m in skipped:
            print("%s  [equivalent: %s]" % (m.name(), m.why))
        print()
        list_sites(by_file, a.operators)
        return 0
    if a.only:
        by_file = only(by_file, a.only, skipped)
        if by_file is None:
            return 2
    elif a.sample:
        by_file = sample(by_file, a.sample, a.seed)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    runner, interrupted = Runner(a, tests), False
    print("mutagen: %d mutants over %d files; log in %s" % (
        sum(len(v) for v in by_file.values()), len(by_file), runner.log.name), flush=True)
    try:
        if not a.no_baseline and not runner.baseline([f for f in by_file if by_file[f]]):
            print("mutagen: fix the tests that fail unmutated first (see the log)")
            return 1
        for path in sorted(by_file):
            runner.mutate_file(path, by_file[path])
    except Interrupted as e:
        interrupted = True
        print("\nmutagen: interrupted (%s); files restored" % e)
        for ms in by_file.values():
            ms[:] = [m for m in ms if m.result]
    finally:
        # the build matches the unmutated sources again
        targets = [tests[f][1] for f in by_file if by_file[f]]
        rc, _ = runner.build([] if [] in targets else sorted({t for ts in targets for t in ts}))
        if rc != 0:
            print("mutagen: the final rebuild failed (see %s)" % runner.log.name)
    score = report(by_file, skipped, a.goal)
    return 130 if interrupted else (0 if score >= a.goal else 1)


if __name__ == "__main__":
    sys.exit(main())
