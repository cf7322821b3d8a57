"""Non-blocking operations (msr_comm_req_t): Request and wait_all."""

import ctypes as _c

from . import _lib
from ._buffers import Buffer
from ._errors import Error
from ._errors import check as _check

_L = _lib.lib


def wait_all(requests):
    """msr_comm_wait_all's rule: waits for every request (None entries
    skipped), then raises the first failure in list order; returns the
    output buffers."""
    results, first = [], None
    for req in requests:
        if req is None:
            results.append(None)
            continue
        try:
            results.append(req.wait())
        except Error as e:
            results.append(None)
            if first is None:
                first = e
    if first is not None:
        raise first
    return results


class _Sender:
    """The result of a receive from any source: the sender, read once the
    receive finished."""

    def __init__(self, src):
        self._src = src

    @property
    def rank(self):
        return self._src.value


class Request:
    """A non-blocking operation in flight (msr_comm_req_t). Holds its
    buffers until wait() or test() finishes it; finish every request (a
    request dropped unfinished is waited for, as msr_comm_wait)."""

    def __init__(self, comm, handle, call, buffers, result):
        self._comm = comm
        self._h = handle
        self._call = call
        self._buffers = buffers
        self._result = result

    def _done(self, st):
        self._h = None
        for b in self._buffers:
            if isinstance(b, Buffer):
                b.release()
        self._buffers = None
        _check(st, self._call)
        if isinstance(self._result, _Sender):
            return self._result.rank
        return self._result

    def wait(self):
        """msr_comm_wait: returns the operation's output buffer, or raises."""
        if self._h is None:
            raise Error(-3, self._call, "the request was already finished")
        h = self._h
        return self._done(_L.msr_comm_wait(h))

    def test(self):
        """msr_comm_test: True when finished (raises if it failed)."""
        if self._h is None:
            return True
        st = _L.msr_comm_test(_c.byref(self._h))
        if st == 1:  # MSR_IN_PROGRESS
            return False
        self._done(st)
        return True

    @property
    def done(self):
        return self._h is None

    def __del__(self):
        try:
            if self._h is not None:
                self.wait()
        except Exception:  # pylint: disable=broad-except
            pass
