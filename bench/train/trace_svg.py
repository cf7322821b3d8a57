#!/usr/bin/env python3
"""Renders a train_gpt --trace file (Chrome-trace JSON) as an SVG timeline.

usage: trace_svg.py TRACE.json OUT.svg [TITLE]

One row per rank: forward spans (F<micro>.<chunk>) in blue, backward
(B<micro>.<chunk>) in green, the optimizer in grey; below each, a thin row
with the rank's communication spans (receives, collectives) in orange.
Only the Python standard library is used.
"""
import json
import sys
from xml.sax.saxutils import escape


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    events = json.load(open(sys.argv[1]))["traceEvents"]
    title = sys.argv[3] if len(sys.argv) == 4 else sys.argv[1]
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        sys.exit("no spans in " + sys.argv[1])
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
    ranks = sorted({e["pid"] for e in spans})
    end = max(e["ts"] + e["dur"] for e in spans)
    left, width, row, gap, top = 150, 1000, 26, 14, 40
    scale = width / end
    height = top + len(ranks) * (row + 8 + gap) + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 20}" '
        f'height="{height}" font-family="sans-serif" font-size="11">',
        f'<rect width="100%" height="100%" fill="white"/>',
        f'<text x="10" y="20" font-size="14">{escape(title)}</text>',
    ]
    colors = {"F": "#6a9fd8", "B": "#74c476", "o": "#bdbdbd"}
    for i, r in enumerate(ranks):
        y = top + i * (row + 8 + gap)
        out.append(f'<text x="10" y="{y + row * 0.7:.1f}">{escape(names.get(r, f"rank {r}"))}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{width}" height="{row}" fill="#f4f4f4"/>')
        for e in spans:
            if e["pid"] != r:
                continue
            x, w = left + e["ts"] * scale, max(e["dur"] * scale, 0.5)
            if e["cat"] == "compute":
                c = colors.get(e["name"][0], "#bdbdbd")
                out.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row}" fill="{c}" '
                           f'stroke="white" stroke-width="0.5"><title>{escape(e["name"])}</title></rect>')
                if w > 22:
                    out.append(f'<text x="{x + w / 2:.2f}" y="{y + row * 0.65:.1f}" '
                               f'text-anchor="middle">{escape(e["name"])}</text>')
            else:
                out.append(f'<rect x="{x:.2f}" y="{y + row + 2}" width="{w:.2f}" height="6" '
                           f'fill="#f28e2b"><title>{escape(e["name"])}</title></rect>')
    y = height - 20
    out.append(f'<text x="{left}" y="{y}">0 ms</text>')
    out.append(f'<text x="{left + width}" y="{y}" text-anchor="end">{end / 1000:.2f} ms</text>')
    legend = [("forward", colors["F"]), ("backward", colors["B"]), ("optimizer", colors["o"]),
              ("communication", "#f28e2b")]
    for k, (label, c) in enumerate(legend):
        x = left + 200 + k * 140
        out.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{c}"/>')
        out.append(f'<text x="{x + 16}" y="{y}">{label}</text>')
    out.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
