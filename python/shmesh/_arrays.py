"""Arrays as the library takes them: shmesh's dtypes, the checks and
conversions of an argument (_prepare, _shape_of), integer arguments, axis
names, axis_index_groups and pytrees.  Above _context; knows no mesh."""
import ctypes
import operator
import threading

import numpy as np

from . import _context, _lib
from ._context import _invalid

try:  # bfloat16 is numpy's only through ml_dtypes
    import ml_dtypes as _ml

    _BF16 = np.dtype(_ml.bfloat16)
except ImportError:
    _BF16 = None

_CODES = {np.dtype(t): c for c, t in enumerate(
    [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
     np.float16])}
_CODES[np.dtype(np.float32)] = 11
_CODES[np.dtype(np.float64)] = 12
if _BF16 is not None:
    _CODES[_BF16] = 10


def _code(dt, what):
    bf16_name = isinstance(dt, str) and dt == "bfloat16"
    if bf16_name and _BF16 is None:
        c = None  # numpy alone does not know the name: say what is missing below
    else:
        dt = np.dtype(dt)
        c = _CODES.get(dt.newbyteorder("=") if dt.byteorder not in "=|" else dt)
    if c is None:
        if bf16_name or dt.name == "bfloat16" or str(dt) == "bfloat16":
            _invalid("%s: bfloat16 needs the ml_dtypes package (pip install ml_dtypes); "
                     "it is not installed" % what)
        _invalid("%s: dtype %s is not one shmesh has (bool, int8..int64, uint8..uint64, "
                 "float16, bfloat16, float32, float64)" % (what, dt))
    return c


def _prepare(x, what):
    """x as a C-contiguous native-order array: the same memory when it is one
    already, else a copy."""
    if (type(x) is np.ndarray and x.dtype in _CODES and x.flags.c_contiguous
            and x.ndim <= _context._MAX_NDIM):
        return x  # the common case, at once
    a = np.asarray(x)
    _code(a.dtype, what)
    if a.dtype.byteorder not in "=|":
        a = a.astype(a.dtype.newbyteorder("="))
    if a.ndim > _context._MAX_NDIM:
        _invalid("%s: arrays have at most %d dimensions%s, got %d"
                 % (what, _lib.MAX_NDIM, " (%d with the device axis)" % _context._MAX_NDIM
                    if _context._MAX_NDIM > _lib.MAX_NDIM else "", a.ndim))
    # not np.ascontiguousarray, which makes a 0-d array (a scalar) 1-d
    return a if a.flags.c_contiguous else np.array(a, order="C")


def _shape_of(a, what):
    """The shape of one device's array.  With several devices per rank
    (shmesh-run --devices-per-rank K), an argument carries one array per
    device along a leading axis of K entries, as jax.pmap's inputs do,
    entry i for the mesh's i-th device on this rank (Mesh.local_devices)."""
    k = _context._local_devices
    if k == 1:
        return a.shape
    if a.ndim == 0 or a.shape[0] != k:
        _invalid("%s: this rank holds %d devices, so an array's leading axis must have one "
                 "entry per device (as jax.pmap's inputs), got shape %s"
                 % (what, k, tuple(a.shape)))
    return a.shape[1:]


def _ptr_checked(a):
    """a's data address through the buffer protocol (or a.ctypes.data for
    a read-only array): 0.6 to 1.1 us."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data if a.size else None


# numpy's array object is PyObject_HEAD followed by the data pointer (the
# field PyArray_DATA reads); on CPython id() is the object's address.
# Reading the pointer there costs 0.35 us, half of the buffer protocol's,
# and works for read-only arrays too.  Used only once it is seen to agree
# with a.ctypes.data on a few arrays; elsewhere (another interpreter, another
# layout) the buffer protocol is used.
_DATA_AT = object.__basicsize__
_VP = ctypes.c_void_p


def _ptr_fast(a):
    return _VP.from_address(id(a) + _DATA_AT).value


def _fast_ptr_agrees():
    import sys
    if sys.implementation.name != "cpython":
        return False
    base = np.arange(24, dtype=np.int64).reshape(4, 6)
    ro = np.arange(3.0)
    ro.flags.writeable = False
    return all(_ptr_fast(a) == a.ctypes.data
               for a in (base, base[1:], base[2, 3:], np.zeros(5, np.int8), ro))


_ptr = _ptr_fast if _fast_ptr_agrees() else _ptr_checked

def _index(v, what, name):
    """v as a Python int when it is an integer (an int or a numpy integer,
    not a bool): int() would make 0.5 a 0 and "0" a 0."""
    if isinstance(v, (bool, np.bool_)):
        _invalid("%s: %s must be an integer, got %r" % (what, name, v))
    try:
        return operator.index(v)
    except TypeError:
        _invalid("%s: %s must be an integer, got %r" % (what, name, v))


def _cint(v, what, name, bits=32):
    """v as a C int (int64_t with bits=64): ctypes would truncate a larger
    one silently, in arrays and declared arguments alike (2**32 + 3 becomes
    3), or refuse it with its own error in undeclared ones."""
    i = _index(v, what, name)
    if not -2 ** (bits - 1) <= i < 2 ** (bits - 1):
        _invalid("%s: %s %d is out of range" % (what, name, i))
    return i


def _name_ok(n):
    """Whether n may be a mesh axis name (the library's rule, and no NUL,
    which ends a C string early: "i\0zz" would reach it as "i")."""
    return (isinstance(n, str) and n != "" and "\0" not in n and
            not any(c in n for c in ",()") and not any(c.isspace() for c in n))


_axes_seen = {}


def _axes(axis_name, what):
    """The C call's axes text ("x,y") of a name or a tuple of names."""
    try:
        return _axes_seen[axis_name]
    except (KeyError, TypeError):  # new, or a list (not hashable)
        pass
    text = _axes_text(axis_name, what)
    if isinstance(axis_name, (str, tuple)) and len(_axes_seen) < 1024:
        _axes_seen[axis_name] = text
    return text


def _axes_text(axis_name, what):
    if isinstance(axis_name, str):
        names = [axis_name]
    elif isinstance(axis_name, (tuple, list)) and all(isinstance(n, str) for n in axis_name):
        names = list(axis_name)
    else:
        _invalid("%s: axis_name must be a name or a tuple of names, got %r" % (what, axis_name))
    if not names:
        _invalid("%s: axis_name names no axis" % what)
    for n in names:
        if not _name_ok(n):  # the C call takes "x,y": a ',' or a NUL would change the names
            _invalid("%s: axis_name %r is no mesh axis name: a name has no NUL, ',', '(', ')' "
                     "or whitespace" % (what, n))
    return ",".join(names).encode()


def _groups(axis_index_groups, what):
    """The shmesh_groups of JAX's axis_index_groups (a list of lists of
    indices), and a reference to it for the call (which keeps the struct
    and the arrays it points to alive)."""
    if axis_index_groups is None:
        return None, None
    try:
        groups = [[_cint(i, what, "axis_index_groups entry") for i in g]
                  for g in axis_index_groups]
    except TypeError:
        _invalid("%s: axis_index_groups must be a list of lists of axis indices, got %r"
                 % (what, axis_index_groups))
    flat = [i for g in groups for i in g]
    idx = (ctypes.c_int * max(len(flat), 1))(*flat)
    sizes = (ctypes.c_int * max(len(groups), 1))(*[len(g) for g in groups])
    g = _lib.Groups(len(groups), len(groups[0]) if groups else 0, idx, sizes)
    return g, ctypes.byref(g)


def _axis(axis, ndim, what, name="axis"):
    a = _index(axis, what, name)
    if not -ndim <= a < ndim:
        _invalid("%s: %s %d is out of range for an array of %d dimensions" % (what, name, a, ndim))
    return a + ndim if a < 0 else a


def _tree_map(f, tree):
    """f applied to every leaf of a pytree of lists, tuples and dicts (as
    JAX's collectives take them), the structure kept."""
    if isinstance(tree, dict):
        return type(tree)((k, _tree_map(f, v)) for k, v in tree.items())
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # a namedtuple
        return type(tree)(*(_tree_map(f, v) for v in tree))
    if isinstance(tree, (list, tuple)):
        return type(tree)(_tree_map(f, v) for v in tree)
    return f(tree)


class _Slot(threading.local):
    """What the blocking call in progress on this thread writes into (set by
    _interop's wrappers around the call, for one array), which _new_out
    hands out instead of a new array: `a`, the out= array; `device`, the
    device memory of a DLPack GPU tensor's call.  None when unset (the
    class's: read at 20 ns, where getattr with a default costs 150)."""
    a = None
    device = None


_out_slot = _Slot()
