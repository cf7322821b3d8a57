"""msrun's statuses as Python exceptions: msrun.Error and one subclass per
status a program may want to catch on its own."""

import builtins

from . import _lib

# include/msrun/base.h (never renumbered)
OK = 0
IN_PROGRESS = 1


class Error(Exception):
    """A libmsrun call failed. ``status`` is the msr_status_t value (< 0),
    ``name`` its enumerator ("MSR_ERR_TIMEOUT"), ``call`` the C function and
    ``message`` msr_last_error()'s sentence (or the status's own text when
    libmsrun left none)."""

    def __init__(self, status, call, message):
        self.status = status
        self.name = status_name(status)
        self.call = call
        self.message = message
        super().__init__("%s: %s: %s" % (call, self.name, message))

    def __reduce__(self):
        return (_make, (self.status, self.call, self.message))


class TimeoutError(Error, builtins.TimeoutError):  # pylint: disable=redefined-builtin
    """MSR_ERR_TIMEOUT: the call's deadline passed."""


class NotFoundError(Error, LookupError):
    """MSR_ERR_NOT_FOUND: no such key, checkpoint or step."""


class InvalidArgumentError(Error, ValueError):
    """MSR_ERR_INVALID_ARG: an argument libmsrun refused."""


class StaleError(Error):
    """MSR_ERR_STALE: this process belongs to an older generation."""


class PeerLostError(Error):
    """MSR_ERR_PEER_LOST: a member of the communicator is gone."""


class CorruptError(Error):
    """MSR_ERR_CORRUPT: a checkpoint that does not check out."""


_BY_STATUS = {
    -7: TimeoutError,
    -9: NotFoundError,
    -2: InvalidArgumentError,
    -42: StaleError,
    -60: PeerLostError,
    -81: CorruptError,
}


def _make(status, call, message):
    return _BY_STATUS.get(status, Error)(status, call, message)


def status_name(status):
    """The enumerator's name of a status ("MSR_ERR_TIMEOUT")."""
    return _lib.lib.msr_status_name(status).decode()


def status_str(status):
    """The status's short sentence ("deadline passed")."""
    return _lib.lib.msr_status_str(status).decode()


def check(status, call):
    """Raises the Error of a failed call, with msr_last_error() read at once
    (it is per thread and the next call overwrites it)."""
    if status == OK:
        return
    message = _lib.lib.msr_last_error().decode(errors="replace")
    raise _make(status, call, message or status_str(status))


for _cls in (Error, TimeoutError, NotFoundError, InvalidArgumentError, StaleError, PeerLostError,
             CorruptError):
    _cls.__module__ = "msrun"
del _cls
