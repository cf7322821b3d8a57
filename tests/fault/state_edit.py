#!/usr/bin/env python3
"""Reads and damages a coordinator's state file (docs/store.md) for tests.

  state_edit.py records FILE          one line per record: INDEX OFFSET LENGTH KIND
                                      (KIND: snapshot, set, add or other)
  state_edit.py expect FILE I         "keys K counter C": what records 0..I-1 hold
                                      (distinct k/<n> keys, the counter's last value)
  state_edit.py damage FILE HOW I     damages record I in place:
      flip-len, flip-seq, flip-crc, flip-hcrc, flip-payload: one byte flipped in
        that field (the sequence number and header CRC only in the current
        format; in the older one they fall on the payload CRC and payload);
      cut: 7 bytes removed from inside its payload, the rest of the file kept;
      swap: records I and I+1 exchanged;
      torn: the file cut 3 bytes before the end of record I (the last);
      reseq: its sequence number moved on by 5, its header CRC made to match
        (a whole record out of sequence; the current format only).
  state_edit.py downgrade FILE        rewrites FILE in the older format ("MSRSTAT2":
                                      u32 length, u32 CRC-32 of the payload)
"""
import re
import struct
import sys
import zlib

MAGIC3, MAGIC2 = b"MSRSTAT3", b"MSRSTAT2"


def frames(data):
    """(offset, header length, payload length) of each record."""
    hlen = 16 if data[:8] == MAGIC3 else 8
    if data[:8] not in (MAGIC3, MAGIC2):
        sys.exit("not a state file with a log")
    out, off = [], 8
    while off + hlen <= len(data):
        (plen,) = struct.unpack_from("<I", data, off)
        if off + hlen + plen > len(data):
            break
        out.append((off, hlen, plen))
        off += hlen + plen
    return out


def kind(i, payload):
    if i == 0:
        return "snapshot"
    if b"counter" in payload:
        return "add"
    return "set" if re.search(rb"k/\d+", payload) else "other"


def expect(data, n):
    keys, counter = set(), 0
    for off, hlen, plen in frames(data)[:n]:
        payload = data[off + hlen : off + hlen + plen]
        keys.update(re.findall(rb"k/(\d+)", payload))
        for m in re.finditer(rb"counter\x12[\x01-\x03](\d+)", payload):
            counter = int(m.group(1))
    return "keys %d counter %d" % (len(keys), counter)


def damage(data, how, i):
    recs = frames(data)
    off, hlen, plen = recs[i]
    end = off + hlen + plen
    at = {"flip-len": 1, "flip-seq": 4, "flip-crc": 8 if hlen == 16 else 5,
          "flip-hcrc": 13 if hlen == 16 else hlen + 1, "flip-payload": hlen + plen // 2}
    if how in at:
        data[off + at[how]] ^= 0x20
    elif how == "cut":
        del data[off + hlen + 3 : off + hlen + 10]
    elif how == "swap":
        noff, nhlen, nplen = recs[i + 1]
        data[off : noff + nhlen + nplen] = data[noff : noff + nhlen + nplen] + data[off:end]
    elif how == "torn":
        del data[end - 3 :]
    elif how == "reseq" and hlen == 16:
        (seq,) = struct.unpack_from("<I", data, off + 4)
        struct.pack_into("<I", data, off + 4, seq + 5)
        struct.pack_into("<I", data, off + 12, zlib.crc32(bytes(data[off : off + 12])))
    else:
        sys.exit("unknown damage " + how)
    return data


def downgrade(data):
    out = bytearray(MAGIC2)
    for off, hlen, plen in frames(data):
        payload = bytes(data[off + hlen : off + hlen + plen])
        out += struct.pack("<II", plen, zlib.crc32(payload)) + payload
    return out


def main():
    cmd, path = sys.argv[1], sys.argv[2]
    data = bytearray(open(path, "rb").read())
    if cmd == "records":
        for i, (off, hlen, plen) in enumerate(frames(data)):
            print(i, off, hlen + plen, kind(i, data[off + hlen : off + hlen + plen]))
    elif cmd == "expect":
        print(expect(data, int(sys.argv[3])))
    elif cmd in ("damage", "downgrade"):
        data = damage(data, sys.argv[3], int(sys.argv[4])) if cmd == "damage" else downgrade(data)
        with open(path, "wb") as f:
            f.write(data)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
