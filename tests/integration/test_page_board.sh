#!/bin/bash
# The run view of a 64-rank job (docs/usage.md), in headless Chromium: two
# runs' history of 64 ranks each (one restart, resumed from an earlier
# step), written in history.jsonl's format, drawn by `msrun board DIR1 DIR2`;
# the rendered DOM has one chart per scalar and run (loss, step_ms, lr: 6),
# each a min/median/max band of the 64 ranks (not a line per rank), its y
# axis from 0, the restart marked at the step it resumed from; a screenshot
# is taken. The history is generated here rather than by 64 real workers:
# 64 workers started on one core starve their msrun's heartbeat past the
# coordinator's 5 s (docs/usage.md gives the measurement); it_runview
# checks the history a real job writes.
# Skipped (77) when Chromium is not installed (Debian: chromium).
# MSRUN_BOARD_SHOT=FILE keeps the screenshot.
. "$(dirname "$0")/lib.sh"

CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
    echo "SKIP: chromium is not installed (Debian: chromium)"
    exit 77
fi

# two runs of 64 ranks on 8 nodes: generation 0 to step 59, generation 1
# resumed from step 50 to 109; rank 7 slower in run b
mkdir -m 0700 "$TMP/a" "$TMP/b"
python3 - "$TMP" <<'PY'
import json, math, random, sys
random.seed(39)
for run, slow in (("a", 0), ("b", 200)):
    with open(f"{sys.argv[1]}/{run}/history.jsonl", "w") as f:
        t = 1.8e9
        for gen, steps in ((0, range(0, 60)), (1, range(50, 110))):
            for st in steps:
                for r in range(64):
                    t += 0.001
                    rec = {"t": round(t, 3), "gen": gen, "node": r // 8, "rank": r, "step": st,
                           "step_ms": 500 + 40 * random.random() + (slow if r == 7 else 0),
                           "scalars": {"loss": 5 * math.exp(-st / 80) + 0.1 * random.random()}}
                    if st % 10 == 0:
                        rec["scalars"]["lr"] = 3e-4
                    f.write(json.dumps(rec, separators=(",", ":")) + "\n")
PY
CODE=0
"$MSRUN" board --out "$TMP/board.html" "$TMP/a" "$TMP/b" >"$TMP/out" 2>"$TMP/err" || CODE=$?
expect_code 0 "msrun board: $(cat "$TMP/err")"

start=$(date +%s)
timeout -k 5 50 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run \
    --user-data-dir="$TMP/chromium" --virtual-time-budget=4000 --window-size=1400,1000 \
    --screenshot="$TMP/board.png" --dump-dom "file://$TMP/board.html" \
    >"$TMP/dom.html" 2>"$TMP/chromium.err" || fail "chromium: $(tail -5 "$TMP/chromium.err")"
echo "chromium rendered the 64-rank view in $(($(date +%s) - start)) s"
python3 - "$TMP/dom.html" <<'PY' || fail "the rendered page: $(head -c 3000 "$TMP/dom.html")"
import re, sys
dom = open(sys.argv[1]).read()
m = re.search(r'<div id="charts" data-charts="(\d+)" data-scalars="(\d+)"', dom)
assert m and m.groups() == ("6", "3"), m and m.groups()
assert re.search(r'id="err">\s*<', dom), "no error shown"
charts = re.findall(r'<div class="chart scalar" data-scalar="([^"]+)" data-run="([^"]+)" '
                    r'data-ranks="(\d+)" data-mode="(\w+)">(.*?)</svg>', dom, re.S)
assert sorted((s, r) for s, r, *_ in charts) == sorted(
    (s, r) for s in ("loss", "step_ms", "lr") for r in ("a", "b")), [c[:2] for c in charts]
for scalar, run, ranks, mode, svg in charts:
    assert ranks == "64" and mode == "band", (scalar, run, ranks, mode)
    assert len(re.findall(r'class="band"', svg)) == 1, (scalar, run, "one band")
    median = re.search(r'<polyline [^>]*class="median"[^>]*points="([^"]*)"', svg)
    assert median and len(median.group(1).split()) >= 10, (scalar, run, "the median line")
    assert 'class="series"' not in svg, (scalar, run, "no line per rank past 8 ranks")
    assert re.search(r'class="ytick"[^>]*>0<', svg), (scalar, run, "y from 0")
    restart = re.findall(r'class="restart" data-generation="(\d+)"', svg)
    assert restart == ["1"], (scalar, run, restart)
# the runs side by side share the y range: run b's slow rank 7 sets both
tops = {}
for scalar, run, _, _, svg in charts:
    ticks = re.findall(r'class="ytick"[^>]*>([^<]*)<', svg)
    tops[(scalar, run)] = ticks[-1]
assert tops[("step_ms", "a")] == tops[("step_ms", "b")], tops
print("board: 64 ranks x 2 runs, 3 scalars, 6 band charts, restarts marked, y from 0")
PY
[ -s "$TMP/board.png" ] && [ "$(head -c 4 "$TMP/board.png" | od -An -c | tr -d ' ')" = "211PNG" ] ||
    fail "no screenshot"
[ -n "${MSRUN_BOARD_SHOT:-}" ] && cp "$TMP/board.png" "$MSRUN_BOARD_SHOT"
ok "Chromium draws a 64-rank job's view: one band chart per scalar and run, restarts marked"
exit $FAILED
