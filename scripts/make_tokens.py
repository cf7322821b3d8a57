#!/usr/bin/env python3
"""Writes a small token data set for tests and examples: a byte-level
byte-pair encoding of a text already on the machine (Debian's GPL-3, else
the Python standard library's argparse.py), in llm.c's .bin layout
(docs/model.md "Token data"): 256 little-endian int32 (magic 20240520,
version 1 = uint16 tokens or 2 = uint32, the token count), then the tokens.

Tokens 0..255 are the bytes; merge i (the most frequent adjacent pair, ties
to the smallest pair) becomes token 256 + i. Nothing is downloaded; the
output depends only on the input text and the options.

usage: make_tokens.py OUT [--val VAL_OUT] [--val-fraction F] [--merges N]
                          [--version 1|2] [--input TEXT] [--max-tokens N]
"""
import argparse
import os
import struct
import sys

MAGIC = 20240520
HEADER_INTS = 256
DEFAULT_INPUTS = ["/usr/share/common-licenses/GPL-3"]


def default_input():
    for path in DEFAULT_INPUTS:
        if os.path.isfile(path):
            return path
    return argparse.__file__  # any Python has its standard library


def bpe(data, merges):
    """The byte-pair encoding of data (bytes) with `merges` merges."""
    ids = list(data)
    for i in range(merges):
        counts = {}
        for pair in zip(ids, ids[1:]):
            counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))
        if counts[best] < 2:
            break
        new, out, j = 256 + i, [], 0
        while j < len(ids):
            if j + 1 < len(ids) and ids[j] == best[0] and ids[j + 1] == best[1]:
                out.append(new)
                j += 2
            else:
                out.append(ids[j])
                j += 1
        ids = out
    return ids


def write(path, tokens, version):
    fmt = "<%d%s" % (len(tokens), "H" if version == 1 else "I")
    header = [0] * HEADER_INTS
    header[0], header[1], header[2] = MAGIC, version, len(tokens)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<%di" % HEADER_INTS, *header))
        f.write(struct.pack(fmt, *tokens))
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--val", help="also write the last --val-fraction of the tokens here")
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--merges", type=int, default=256)
    ap.add_argument("--version", type=int, choices=(1, 2), default=1)
    ap.add_argument("--input", default=None)
    ap.add_argument("--max-tokens", type=int, default=0, help="keep the first N tokens (0: all)")
    a = ap.parse_args()
    path = a.input or default_input()
    with open(path, "rb") as f:
        tokens = bpe(f.read(), a.merges)
    if a.max_tokens > 0:
        tokens = tokens[: a.max_tokens]
    cut = len(tokens)
    if a.val is not None:
        cut = len(tokens) - max(1, int(len(tokens) * a.val_fraction))
        write(a.val, tokens[cut:], a.version)
    write(a.out, tokens[:cut], a.version)
    print("%s: %d tokens (largest %d) from %s" % (a.out, cut, max(tokens[:cut]), path),
          file=sys.stderr)


if __name__ == "__main__":
    main()
