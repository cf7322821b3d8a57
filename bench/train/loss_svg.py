#!/usr/bin/env python3
"""Draws train_gpt loss curves ("step N loss L ..." lines) as one SVG.

usage: loss_svg.py OUT.svg TITLE NAME=FILE [NAME=FILE ...]

One polyline per run, the step on x, the loss on y, with a legend holding
each run's final loss. Only the Python standard library is used.
"""
import sys
from xml.sax.saxutils import escape


def read(path):
    pts = []
    for line in open(path):
        f = line.split()
        if len(f) >= 4 and f[0] == "step" and f[2] == "loss":
            pts.append((int(f[1]), float(f[3])))
    return pts


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    runs = [(a.split("=", 1)[0], read(a.split("=", 1)[1])) for a in sys.argv[3:]]
    runs = [(n, p) for n, p in runs if p]
    if not runs:
        sys.exit("no 'step N loss L' lines in the files")
    xmax = max(p[-1][0] for _, p in runs)
    ys = [y for _, p in runs for _, y in p]
    ylo, yhi = min(ys), max(ys)
    left, top, width, height = 60, 40, 800, 400
    sx = width / max(xmax, 1)
    sy = height / max(yhi - ylo, 1e-9)
    colors = ["#3b75af", "#e1812c", "#3a923a", "#c03d3e"]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 200}" '
        f'height="{top + height + 50}" font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="10" y="20" font-size="14">{escape(sys.argv[2])}</text>',
        f'<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="none" '
        'stroke="#999"/>',
        f'<text x="{left}" y="{top + height + 20}">step 0</text>',
        f'<text x="{left + width - 60}" y="{top + height + 20}">step {xmax}</text>',
        f'<text x="5" y="{top + 10}">{yhi:.3f}</text>',
        f'<text x="5" y="{top + height}">{ylo:.3f}</text>',
    ]
    for i, (name, pts) in enumerate(runs):
        c = colors[i % len(colors)]
        line = " ".join(f"{left + x * sx:.1f},{top + (yhi - y) * sy:.1f}" for x, y in pts)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.2" points="{line}"/>')
        ly = top + 20 + 20 * i
        out.append(f'<rect x="{left + width + 15}" y="{ly - 10}" width="12" height="12" '
                   f'fill="{c}"/>')
        out.append(f'<text x="{left + width + 32}" y="{ly}">{escape(name)}: final '
                   f'{pts[-1][1]:.4f}</text>')
    out.append("</svg>")
    with open(sys.argv[1], "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
