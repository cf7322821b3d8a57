"""The arguments of libmsrun's calls from Python values, and their results
back: keys, paths, bytes-like inputs, memory libmsrun hands over."""

import ctypes as _c
import os

from . import _lib
from ._buffers import Buffer

_L = _lib.lib

# MSR_IN_PLACE of comm.h: a send buffer that means "the input is in recvbuf"
_IN_PLACE = _c.c_void_p(1)

# MSR_ERR_NOT_FOUND of base.h
_NOT_FOUND = -9


def _key(key):
    if isinstance(key, str):
        key = key.encode()
    elif isinstance(key, (bytes, bytearray)):
        key = bytes(key)
    else:
        raise TypeError("msrun: a key is a str or bytes, not %s" % type(key).__name__)
    # C reads a key up to its first NUL: "a\0b" would be the key "a"
    if b"\0" in key:
        raise ValueError("msrun: key %r contains a NUL byte" % key)
    return key


def _path(path):
    return os.fsencode(path)


def _gather_list(res):
    """The entries of a msr_gather_result_t as a list of bytes; frees it."""
    try:
        r = res.contents
        base = _c.addressof(r.data.contents) if r.count and r.data else 0
        return [
            _c.string_at(base + r.offsets[i], r.lengths[i]) if r.lengths[i] else b""
            for i in range(r.count)
        ]
    finally:
        _L.msr_gather_result_free(res)


def _bytes_in(value, what):
    """bytes-like (or str, as UTF-8) -> (keep-alive object, address, length)."""
    if isinstance(value, str):
        value = value.encode()
    if isinstance(value, bytes):
        return value, _c.cast(_c.c_char_p(value), _c.c_void_p), len(value)
    buf = Buffer(value, what, writable=False, dtype="u8")
    return buf, buf.address, buf.nbytes


def _take(ptr, length):
    """Copies length bytes at ptr into bytes and frees ptr (free(3))."""
    try:
        return _c.string_at(ptr, length) if length else b""
    finally:
        _lib.free(ptr)
