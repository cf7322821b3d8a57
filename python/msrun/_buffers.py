"""Buffers for the communicators: any object with the buffer protocol
(NumPy arrays, bytearray, array.array, memoryview), or an object whose
``.numpy()`` shares its memory (a PyTorch CPU tensor; a torch.bfloat16
one through its bits, as bf16), as an address, an element count and an
msr_dtype_t."""

import ctypes
import sys

# include/msrun/comm.h, msr_dtype_t
F32, F64, F16, BF16, I32, I64, U8 = range(7)
_SIZE = {F32: 4, F64: 8, F16: 2, BF16: 2, I32: 4, I64: 8, U8: 1}

# dtype names accepted by the dtype= argument
DTYPES = {
    "f32": F32,
    "float32": F32,
    "f64": F64,
    "float64": F64,
    "f16": F16,
    "float16": F16,
    "bf16": BF16,
    "bfloat16": BF16,
    "i32": I32,
    "int32": I32,
    "i64": I64,
    "int64": I64,
    "u8": U8,
    "uint8": U8,
}

# include/msrun/comm.h, msr_op_t
OPS = {"sum": 0, "prod": 1, "min": 2, "max": 3, "avg": 4}

# struct-module format letter (after the byte-order mark) -> dtype; the
# integer letters go by the item size, which depends on the platform
_FLOATS = {"f": F32, "d": F64, "e": F16}
_SIGNED = "bhilq"
_BYTES = "Bc"

_NATIVE_MARKS = ("@", "=", "<" if sys.byteorder == "little" else ">")


def dtype_of(view):
    """The msr_dtype_t of a memoryview's format; TypeError when libmsrun
    has none for it."""
    fmt = view.format
    core = fmt
    if core and core[0] in "@=<>!":
        if core[0] not in _NATIVE_MARKS:
            raise TypeError("msrun: buffer format %r is not in this machine's byte order" % fmt)
        core = core[1:]
    if core in _FLOATS:
        return _FLOATS[core]
    if core in _SIGNED and view.itemsize in (4, 8):
        return I32 if view.itemsize == 4 else I64
    if core in _BYTES and view.itemsize == 1:
        return U8
    raise TypeError(
        "msrun: no msrun dtype for buffer format %r (item size %d): the communicators "
        "take float32, float64, float16, int32, int64 and uint8 (and bfloat16: torch "
        "tensors as they are, bits in an int16 array with dtype='bf16'); pass dtype= to "
        "reinterpret the bytes" % (fmt, view.itemsize)
    )


def parse_dtype(dtype):
    if isinstance(dtype, int) and dtype in _SIZE:
        return dtype
    try:
        return DTYPES[str(dtype).lower()]
    except KeyError:
        raise TypeError(
            "msrun: unknown dtype %r (one of %s)" % (dtype, ", ".join(sorted(DTYPES)))
        ) from None


def parse_op(op):
    try:
        return OPS[str(op).lower()]
    except KeyError:
        raise ValueError("msrun: unknown op %r (one of %s)" % (op, ", ".join(OPS))) from None


def _bf16_bits(obj):
    """A torch.bfloat16 tensor as an int16 tensor on the same memory (NumPy
    has no bfloat16: its .numpy() fails); None for anything else."""
    dtype = getattr(obj, "dtype", None)
    as_view = getattr(obj, "view", None)
    if str(dtype) != "torch.bfloat16" or not callable(as_view):
        return None
    torch = sys.modules.get("torch")
    return as_view(torch.int16) if torch is not None else None


def _view(obj, what):
    """(memoryview, the dtype the object implies or None)."""
    if isinstance(obj, memoryview):
        return obj, None
    try:
        return memoryview(obj), None
    except TypeError:
        pass
    implied = None
    bits = _bf16_bits(obj)
    if bits is not None:  # torch.bfloat16: its bits, reduced as bf16
        obj, implied = bits, BF16
    numpy = getattr(obj, "numpy", None)  # a torch CPU tensor shares its memory
    if callable(numpy):
        try:
            return memoryview(numpy()), implied
        except (TypeError, RuntimeError) as e:
            raise TypeError(
                "msrun: %s: %s.numpy() gives no buffer: %s" % (what, type(obj).__name__, e)
            ) from None
    raise TypeError(
        "msrun: %s: a %s has no buffer (NumPy arrays, bytearray, array.array, "
        "memoryview and CPU tensors do)" % (what, type(obj).__name__)
    )


class Buffer:
    """A buffer held for the length of a call (or of a request):
    ``address``, ``nbytes``, ``dtype`` and ``count`` (elements of dtype)."""

    __slots__ = ("obj", "view", "ref", "address", "nbytes", "dtype", "count")

    def __init__(self, obj, what, writable, dtype=None):
        view, implied = _view(obj, what)
        if not view.c_contiguous:
            raise ValueError(
                "msrun: %s is not contiguous (shape %s, strides %s): pass a C-contiguous "
                "copy (numpy.ascontiguousarray, tensor.contiguous())"
                % (what, view.shape, view.strides)
            )
        if writable and view.readonly:
            raise ValueError("msrun: %s is read-only; the result needs a writable buffer" % what)
        self.obj = obj
        self.view = view
        if dtype is not None:
            self.dtype = parse_dtype(dtype)
        else:
            self.dtype = implied if implied is not None else dtype_of(view)
        self.nbytes = view.nbytes
        size = _SIZE[self.dtype]
        if self.nbytes % size:
            raise ValueError(
                "msrun: %s holds %d bytes, not a whole number of %d-byte elements"
                % (what, self.nbytes, size)
            )
        self.count = self.nbytes // size
        if self.nbytes == 0:
            self.ref = None
            self.address = None
        elif view.readonly:
            # ctypes maps only writable memory; a read-only input (bytes) is
            # copied once
            self.ref = ctypes.create_string_buffer(view.tobytes(), self.nbytes)
            self.address = ctypes.addressof(self.ref)
        else:
            self.ref = ctypes.c_char.from_buffer(view)  # its first byte: the address
            self.address = ctypes.addressof(self.ref)

    def release(self):
        """Lets go of the memory (a bytearray may be resized again)."""
        self.ref = None
        self.view = None
        self.obj = None


def counts_array(values, what):
    values = list(values)
    for v in values:
        if int(v) < 0:
            raise ValueError("msrun: %s holds a negative value" % what)
    return (ctypes.c_uint64 * len(values))(*[int(v) for v in values])
