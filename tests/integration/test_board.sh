#!/bin/bash
# Progress bars on a terminal: msrun runs under a pseudo-terminal, its
# output goes through a small terminal emulator (carriage return, newline,
# cursor up, erase below), and the screen must show every rank's bar at
# once, each rank's latest state on a row of its own, with msrun's own log
# lines above them; at the end each final state stays, once.
. "$(dirname "$0")/lib.sh"

# Each rank holds at step 10 until the test has seen the three bars at once
# ($1 appears; 60 s at most): bars that ran for a fixed second could be over
# on a slow machine before the last rank's began.
cat >"$TMP/bar.sh" <<'SH'
#!/bin/sh
echo "rank $MSR_RANK starting"
i=1
while [ $i -le 20 ]; do
    printf '\rstep %d/20 of rank %d' "$i" "$MSR_RANK"
    if [ $i = 10 ]; then
        n=0
        while [ ! -e "$1" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
    fi
    sleep 0.05
    i=$((i + 1))
done
printf '\n'
echo "rank $MSR_RANK done"
SH
chmod +x "$TMP/bar.sh"

python3 - "$MSRUN" "$TMP/bar.sh" "$MARKER" "$TMP/seen" <<'PY' || fail "the board"
import codecs, os, pty, re, select, struct, fcntl, termios, sys, time

msrun, prog, marker, seen = sys.argv[1:5]
pid, fd = pty.fork()
if pid == 0:
    os.environ["MSRUN_TEST_MARKER"] = marker
    os.execv(msrun, [msrun, "--worker_num=3", "--worker_timeout=0.2", prog, seen])
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))

screen, row, col = [""], 0, 0
def put(text):
    global row, col
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\x1b":
            m = re.match(r"\x1b\[(\d*)([A-Za-z])", text[i:])
            assert m, repr(text[i:i + 10])
            n, op = int(m.group(1) or 1), m.group(2)
            if op == "A":
                row = max(0, row - n)
            elif op == "J":
                screen[row] = screen[row][:col]
                del screen[row + 1:]
            i += len(m.group(0))
            continue
        if c == "\r":
            col = 0
        elif c == "\n":
            row += 1
            col = 0
            if row == len(screen):
                screen.append("")
        else:
            line = screen[row].ljust(col)
            screen[row] = line[:col] + c + line[col + 1:]
            col += 1
        i += 1

bar = re.compile(r"^\[node 0 rank (\d)\] step (\d+)/20 of rank (\d)$")
seen_all_at_once = False
decoder = codecs.getincrementaldecoder("utf-8")("replace")
deadline = time.time() + 60
while time.time() < deadline:
    if not seen_all_at_once and time.time() > deadline - 30:
        open(seen, "w").close()  # never seen: let the bars end (the test fails)
    r, _, _ = select.select([fd], [], [], 1)
    if not r:
        continue
    try:
        chunk = os.read(fd, 65536)
    except OSError:
        break
    if not chunk:
        break
    text = decoder.decode(chunk)
    put(text)
    live = [bar.match(l) for l in screen]
    running = {m.group(1) for m in live if m and int(m.group(2)) < 20}
    for m in live:
        if m:
            assert m.group(1) == m.group(3), f"a row mixes two ranks: {m.group(0)}"
    if running == {"0", "1", "2"} and not seen_all_at_once:
        seen_all_at_once = True
        open(seen, "w").close()  # the bars may go on
os.waitpid(pid, 0)
final = "\n".join(screen)
assert seen_all_at_once, "never saw the three bars at once:\n" + final
for r in "012":
    lines = [l for l in screen if l == f"[node 0 rank {r}] step 20/20 of rank {r}"]
    assert len(lines) == 1, f"rank {r}'s final bar {len(lines)} times:\n" + final
    assert sum(f"rank {r} done" in l for l in screen) == 1, final
# msrun's own line (the worker_timeout notice) went above the bars, whole
warn = [l for l in screen if "only workers that link libmsrun are watched" in l]
assert len(warn) == 1 and warn[0].startswith("msrun[node 0] warning:"), final
print("final screen:\n" + final)
PY
ok "on a terminal every rank's bar has a row of its own, msrun's lines above them"
no_leftovers "board"
