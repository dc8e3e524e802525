"""Shared memory: alloc, a numpy array in the job's shared heap (the
zero-copy path of the collectives), freed by its last reference on the
context's thread.  Above _arrays."""
import ctypes
import math
import operator
import weakref

import numpy as np

from . import _context
from ._lib import lib
from ._errors import _raise
from ._context import _get_ident, _invalid, _own
from ._arrays import _code, _index

_MAX_BYTES = 2 ** 62  # an array's most bytes (shmesh.h)


def alloc(shape, dtype=np.float32):
    """A zeroed array in the job's shared heap: collectives on it move data
    with one copy (zero-copy path).  Freed when the last reference goes;
    not to be used after finalize()."""
    _code(dtype, "alloc")  # before np.dtype: "bfloat16" without ml_dtypes gets the clear message
    dt = np.dtype(dtype)
    try:  # exact integers: int64 arithmetic wrapped (2**32 + 1) * 2**32 to 2**32
        shape = ((operator.index(shape),) if np.ndim(shape) == 0 else
                 tuple(_index(n, "alloc", "a dimension") for n in shape))
    except TypeError:
        _invalid("alloc: a shape is an integer or a tuple of integers, got %r" % (shape,))
    if any(n < 0 for n in shape):
        _invalid("alloc: shape %s has a negative dimension" % (shape,))
    nbytes = math.prod(shape) * dt.itemsize
    if nbytes > _MAX_BYTES:  # a size_t would wrap: (2**61 + 1) * 8 bytes is 8
        _invalid("alloc: shape %s of %s is %d bytes; an array holds at most 2**62"
                 % (shape, dt, nbytes))
    if nbytes == 0:
        return np.zeros(shape, dt)
    ctx = _own("alloc")
    _free_deferred()
    ptr = lib.shmesh_alloc(ctx, nbytes)
    if not ptr:
        _raise(-6, ctx)
    try:
        buf = (ctypes.c_char * nbytes).from_address(ptr)
        ctypes.memset(ptr, 0, nbytes)
        a = np.frombuffer(buf, dtype=dt).reshape(shape)
        weakref.finalize(buf, _free, ctx, ptr)
    except BaseException:
        lib.shmesh_free(ctx, ptr)  # nothing refers to it yet
        raise
    return a


def _free(ctx, ptr):
    if _context._ctx is None or _context._ctx.value != ctx.value:
        return  # the context went, and its heap with it
    if _get_ident() != _context._owner:
        # The garbage collector runs on whichever thread allocates: the
        # context's thread frees it at its next alloc (the library would
        # refuse a second thread, or meet the first inside).
        _context._deferred_frees.append(ptr)
        return
    lib.shmesh_free(ctx, ptr)


def _free_deferred():
    while _context._deferred_frees:
        lib.shmesh_free(_context._ctx, _context._deferred_frees.pop())
