"""shmesh from Python: JAX's named-axis collectives between the processes of
one node, on numpy arrays.

    import numpy as np, shmesh
    shmesh.init()                                  # a world of 1 without shmesh-run
    mesh = shmesh.Mesh(np.arange(4).reshape(2, 2), ("data", "model"))
    with mesh:
        y = shmesh.psum(x, "data")

Run under the launcher: ``shmesh-run -n 4 -- python3 train.py``.  Names and
arguments follow ``jax.lax`` and ``jax.sharding``; every function returns a
new array (``ragged_all_to_all`` a new output), and a failed call raises a
``shmesh.Error`` carrying the library's sentence.  Global arrays:
``NamedSharding(mesh, P("data", None))``, ``make_array_from_callback``,
``make_array_from_single_device_arrays``, ``np.asarray(a)`` (a collective
gather).  With several devices per rank (shmesh-run --devices-per-rank K),
arrays carry a leading axis of K, one entry per device of
``mesh.local_devices``, as jax.pmap's do.  Async dispatch: ``psum_async`` and
the other ``*_async`` forms return a ``Pending`` (``block_until_ready()``)
holding a ``Token``; effects: ``Effect``, ``callback(fn, *args)`` (run as
``fn(device, *args)`` on the library's thread), ``effects_barrier()``.  See
docs/python.md.
"""
import atexit
import collections
import ctypes
import functools
import itertools
import math
import operator
import os
import sys
import threading
import weakref

import numpy as np

from . import _lib
from ._lib import lib, OPS, Op

__all__ = [
    "init", "finalize", "initialized", "rank", "world_size", "device_count", "notifier",
    "abort", "barrier", "Mesh", "axis_index", "axis_size", "alloc", "Error", "InvalidArgument",
    "PeerDead", "Aborted", "Timeout", "Mismatch", "OutOfMemory", "SystemFailure",
    "BadSegment", "PartitionSpec", "P", "NamedSharding", "GlobalArray", "Shard",
    "make_array_from_callback", "make_array_from_single_device_arrays", "device_put",
    "device_array", "DeviceArray",
    "barrier_async", "Pending", "Token", "wait_all", "wait_any", "runtime_token", "Effect",
    "callback", "effects_barrier", "CallbackError", "hand_over", "ops",
]  # and the collectives, from the library's op table (OPS, below the wrappers)


# ---- errors -----------------------------------------------------------------

class Error(Exception):
    """A failed shmesh call: `code` is the library's (negative) error code,
    the message the sentence that explains it (shmesh_last_error)."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


class InvalidArgument(Error, ValueError):
    """SHMESH_ERR_INVALID: a wrong argument, found before anything moved."""


class PeerDead(Error):
    """SHMESH_ERR_PEER_DEAD: another rank died."""


class Aborted(Error):
    """SHMESH_ERR_ABORTED: the job was aborted."""


class Timeout(Error, TimeoutError):
    """SHMESH_ERR_TIMEOUT: a wait lasted longer than SHMESH_TIMEOUT."""


class Mismatch(Error):
    """SHMESH_ERR_MISMATCH: ranks made different collective calls."""


class OutOfMemory(Error, MemoryError):
    """SHMESH_ERR_NOMEM."""


class SystemFailure(Error, OSError):
    """SHMESH_ERR_SYSTEM: a system call failed."""


class BadSegment(Error):
    """SHMESH_ERR_BAD_SEGMENT: the job's segment is missing or corrupt."""


_ERRORS = {-1: InvalidArgument, -2: PeerDead, -3: Aborted, -4: Timeout, -5: Mismatch,
           -6: OutOfMemory, -7: SystemFailure, -8: BadSegment}


def _raise(rc, ctx=None):
    text = lib.shmesh_last_error(ctx)
    text = text.decode(errors="replace") if text else ""
    if not text:
        text = (lib.shmesh_strerror(rc) or b"error %d" % rc).decode(errors="replace")
    raise _ERRORS.get(rc, Error)(text, rc)


def _invalid(text):
    """Raises the binding's own InvalidArgument, worded as the library's
    ("rank R: what: ...") once the rank is known."""
    raise InvalidArgument(("rank %d: %s" % (_rank, text)) if _rank >= 0 else text, -1)


def _raise_on(rc, mp, op=None):
    """_raise for a call given the mesh pointer mp.  With no mesh given and
    none pushed on this thread, the library has no context to explain the
    refusal in: its sentence is this thread's (shmesh_last_error(NULL)),
    and the context's may be an older one about something else.  op: the
    op whose shmesh_axis_size query this was (named instead)."""
    if mp is None and rc == -1 and not lib.shmesh_mesh_current():
        text = _last_error(None)
        if text:
            if op is not None and text.startswith("shmesh_axis_size: "):
                text = "shmesh_%s: %s" % (op, text[len("shmesh_axis_size: "):])
            raise InvalidArgument(text if text.startswith("rank ") else
                                  "rank %d: %s" % (_rank, text), rc)
    _raise(rc, _ctx)


# ---- the context ------------------------------------------------------------

_ctx = None       # ctypes.c_void_p of shmesh_ctx, once init() has run
_gen = 0          # finalize() count: tokens and effects of an earlier context are stale
_rank = -1        # this rank, for callbacks' messages (which must not call the library)
_local_devices = 1  # K: arrays of collectives carry a leading axis of K (_shape_of)
_MAX_NDIM = _lib.MAX_NDIM  # the most dimensions an argument may have: one more with K > 1
_meshes = weakref.WeakSet()
_lock = threading.Lock()
_at_exit_registered = False

# The thread the context belongs to (docs/python.md, "Threads and
# processes"): the one that made it, or was given it by hand_over.  The
# library refuses a second thread only while the first is inside a call,
# so which of two busy threads it refused was a matter of timing, and
# differed between ranks: one thread's call on rank 0 met the other's on
# rank 1 (wrong sums, returned as OK).  The binding refuses every other
# thread before the library is reached, the same way on every rank.
_get_ident = threading.get_ident
_owner = None         # its threading.get_ident(); None until known
_owner_thread = None  # its threading.Thread
_in_callback = threading.local()  # .on while _trampoline runs a callback

# (rank, pid) of the parent in a fork child of a process that held a
# context: the context is the parent's (its segment, its call numbers, its
# progress thread, which the child does not have), so every call is
# refused and the child's exit leaves the job alone.
_fork_parent = None


def _after_fork_in_child():
    global _ctx, _gen, _fork_parent, _lock, _registry_lock, _owner, _owner_thread
    _lock = threading.Lock()  # another thread of the parent may have held them
    _registry_lock = threading.Lock()
    if _ctx is None and _gen == 0:
        return  # the parent never joined a job: the child may
    _fork_parent = (_rank, os.getppid())
    if _ctx is not None:
        # What the parent had in flight is not the child's to wait for.
        why = _fork_sentence("wait")
        for tok in _registry:
            if tok._failed is None and tok._exc is None:
                tok._failed = (-1, why)
        _registry.clear()
        _cb_records.clear()
        _ctx = None  # nothing of the parent's is freed, nor finalized at exit
        _gen += 1
    _owner = _owner_thread = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def _fork_sentence(what):
    return ("rank %d: %s: this process (pid %d) is a fork child of rank %d (pid %d), whose "
            "context it inherited: only the process that joined the job may use it (and this "
            "process's exit does not finalize it); call shmesh from the parent, or exec a "
            "program that joins a job of its own" % (_fork_parent[0], what, os.getpid(),
                                                      *_fork_parent))


def init(what="init"):
    """Joins the job (shmesh-run's environment), or makes a world of one.
    Collective under the launcher.  Calling it again does nothing; the
    functions below call it themselves when needed.  The context belongs to
    the calling thread (hand_over gives it to another)."""
    global _ctx, _local_devices, _MAX_NDIM, _rank, _owner, _owner_thread, _at_exit_registered
    if _fork_parent is not None:
        raise InvalidArgument(_fork_sentence(what), -1)
    with _lock:
        if _ctx is not None:
            return
        p = ctypes.c_void_p()
        rc = lib.shmesh_init(ctypes.byref(p))
        if rc:
            _raise(rc, None)
        _ctx = p
        _rank = lib.shmesh_rank(p)
        _local_devices = lib.shmesh_local_device_count(p)
        _MAX_NDIM = _lib.MAX_NDIM + (_local_devices > 1)
        _owner, _owner_thread = _get_ident(), threading.current_thread()
        if not _at_exit_registered:
            _at_exit_registered = True
            atexit.register(_at_exit)
            _hook_excepthook()


def initialized():
    return _ctx is not None


def _c():
    """The context, for what any thread may ask (rank, world size, ...)."""
    if _ctx is None:
        init()
    return _ctx


def _own(what):
    """The context, for a call `what` that only its thread may make (a
    collective, or a local call that enters the context)."""
    if _ctx is None:
        init(what)
    if _get_ident() != _owner:
        _other_thread(what)
    return _ctx


def _other_thread(what):
    """Returns when this thread may call after all: it was given the
    context before it started, or the thread that held it has ended (it is
    then this thread's), or it runs a callback (the library refuses that
    with its own sentence).  Else refuses the call."""
    global _owner, _owner_thread
    if getattr(_in_callback, "on", False):
        return
    me, t = threading.current_thread(), _owner_thread
    if t is me or (t is not None and t.ident is not None and not t.is_alive()):
        _owner, _owner_thread = _get_ident(), me
        return
    state = ("which has not started yet" if t is not None and t.ident is None else
             "which is still running")
    _invalid("%s called from thread %r (%d), but the context belongs to thread %r (%s), %s: a "
             "context is used by one thread (the one that joined the job, or the one "
             "shmesh.hand_over gave it to; a thread that ended gives it up to the next that "
             "calls), on every rank alike, so that no rank pairs one thread's call with another "
             "thread's" % (what, me.name, _get_ident(), getattr(t, "name", None),
                           "%d" % t.ident if t is not None and t.ident else "-", state))


def hand_over(thread):
    """Gives the context to `thread` (a threading.Thread, started or not):
    from then on its calls are accepted and this thread's are refused, on
    every rank alike.  Called by the thread that holds the context (the one
    that joined the job, or was given it); not needed after that thread
    ended (the next thread to call takes the context)."""
    global _owner, _owner_thread
    if not isinstance(thread, threading.Thread):
        _invalid("hand_over: thread must be a threading.Thread, got %r" % (thread,))
    _own("hand_over")
    _owner, _owner_thread = thread.ident, thread


def finalize():
    """Leaves the job (collective): work still pending (async collectives,
    callbacks) is waited for first, its failures kept for its tokens; meshes
    made are destroyed (with their shardings and global arrays), and arrays
    from alloc() and shards' data must not be used after."""
    if _fork_parent is not None:
        raise InvalidArgument(_fork_sentence("finalize"), -1)
    if _ctx is None:
        return
    _own("finalize")
    rc = _leave(lib.shmesh_finalize)
    if rc:
        _raise(rc, None)


def _leave(how):
    """finalize()'s work, with how(ctx) to leave: 0 or an error code."""
    global _ctx, _gen
    with _lock:
        if _ctx is None:
            return 0
        _drain()
        for m in list(_meshes):
            m._destroy()
        ctx, _ctx = _ctx, None
        _gen += 1
        _deferred_frees.clear()  # the heap goes with the context
        rc = how(ctx)
        _cb_records.clear()  # every callback ran: the dispatch queue was drained
    return rc


# The exception that ends the program, seen by sys.excepthook (its text
# goes to the other ranks and the launcher): see _at_exit.
_uncaught = None
_excepthook = None


def _hook_excepthook():
    global _excepthook
    prev = sys.excepthook

    def hook(tp, value, tb):
        global _uncaught
        _uncaught = value
        prev(tp, value, tb)
    _excepthook = sys.excepthook = hook


def _one_line(e):
    import traceback
    text = traceback.format_exception_only(type(e), e)[-1].strip().replace("\n", " ")
    return text if len(text) <= 160 else text[:157] + "..."


def _at_exit():
    # A rank that returns without finalize() would look to the others like
    # one that died.  But finalize is collective: a rank that ends on an
    # exception or sys.exit(3) while the others still call made them see a
    # finalize they never called (Mismatch) instead of its failure, and the
    # launcher blame whichever rank exited first.  The exit status is known
    # only after Python's atexit functions ran, so the library's exit
    # handler decides (shmesh_finalize_at_exit): finalize at status 0,
    # else tell the others (PeerDead naming this rank, its status and the
    # exception).
    if _ctx is None or _fork_parent is not None:
        return
    t = _owner_thread
    if _get_ident() != _owner and t is not None and t.is_alive():
        return  # a daemon thread still holds the context: leave as a rank that died
    exc = _uncaught
    if exc is None and sys.excepthook is not _excepthook:
        exc = getattr(sys, "last_value", None)  # sys.excepthook was replaced after init
    why = ("uncaught " + _one_line(exc)).encode(errors="replace") if exc is not None else None
    try:
        if _leave(lambda ctx: lib.shmesh_finalize_at_exit(ctx, why) and
                  lib.shmesh_finalize(ctx)):
            pass  # failures of the last barrier: the others know them too
    except Error:
        pass


def rank():
    return lib.shmesh_rank(_c())


def world_size():
    return lib.shmesh_world_size(_c())


def device_count():
    return lib.shmesh_device_count(_c())


def notifier():
    """How this rank sleeps while it waits: "uring" or "futex"."""
    return lib.shmesh_notifier(_c()).decode()


def abort(code=1, why=""):
    """Ends the whole job (shmesh_abort): records `why` in the job's segment
    so every other rank's pending and later calls raise Aborted naming this
    rank, then exits this process at once with status `code` (1 when 0 or
    out of 1..255), which makes shmesh-run stop the others.  Like
    os._exit: no finally blocks, atexit functions or buffered output of
    this process run after it (flush what must be seen first)."""
    try:
        c = int(code)
    except (TypeError, ValueError):
        c = 1
    if not 1 <= c <= 255:
        c = 1
    lib.shmesh_abort(_ctx, c, str(why).encode(errors="replace"))


def barrier():
    rc = lib.shmesh_barrier(_own("barrier"))
    if rc:
        _raise(rc, _ctx)


# ---- dtypes and arrays --------------------------------------------------------

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
            and x.ndim <= _MAX_NDIM):
        return x  # the common case, at once
    a = np.asarray(x)
    _code(a.dtype, what)
    if a.dtype.byteorder not in "=|":
        a = a.astype(a.dtype.newbyteorder("="))
    if a.ndim > _MAX_NDIM:
        _invalid("%s: arrays have at most %d dimensions%s, got %d"
                 % (what, _lib.MAX_NDIM, " (%d with the device axis)" % _MAX_NDIM
                    if _MAX_NDIM > _lib.MAX_NDIM else "", a.ndim))
    # not np.ascontiguousarray, which makes a 0-d array (a scalar) 1-d
    return a if a.flags.c_contiguous else np.array(a, order="C")


def _shape_of(a, what):
    """The shape of one device's array.  With several devices per rank
    (shmesh-run --devices-per-rank K), an argument carries one array per
    device along a leading axis of K entries, as jax.pmap's inputs do,
    entry i for the mesh's i-th device on this rank (Mesh.local_devices)."""
    k = _local_devices
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

_descs = threading.local()


def _seen():
    try:
        return _descs.seen
    except AttributeError:
        _descs.seen = {}
        return _descs.seen


def _new_desc(a):
    """(a's first struct, a reference to its structs, the structs, the
    bytes of one device's array)."""
    k = _local_devices
    shape = a.shape[1:] if k > 1 else a.shape
    arr = (_lib.Array * k)()
    for d in arr:
        d.dtype = _CODES[a.dtype]
        d.ndim = len(shape)
        for i, n in enumerate(shape):
            d.shape[i] = n
        d.bdim = 0
    return (arr[0], ctypes.byref(arr), arr, a.nbytes // k)


def _set_data(e, a):
    p = _ptr(a)
    if _local_devices == 1:
        e[0].data = p
    else:
        for i, d in enumerate(e[2]):
            d.data = p + i * e[3] if p is not None else None


def _desc(a, role):
    """What a call takes for array a as its argument `role` (0, 1, ...): a
    reference to its shmesh_array, or to one per local device when the rank
    holds several (a's leading axis, see _shape_of).  Calls mostly repeat
    their dtypes and shapes, and a call's structs are not kept after it
    returns: each thread keeps the structs per role, dtype, shape and
    device count, and only the data addresses change (building them costs
    a microsecond, more than the C psum of a few bytes)."""
    seen = _seen()
    key = (role, a.dtype.num, a.shape, _local_devices)
    e = seen.get(key)
    if e is None:
        if len(seen) >= 512:
            seen.clear()
        e = seen[key] = _new_desc(a)
    _set_data(e, a)
    return e[1]


def _in_out(a, out):
    """_desc(a, 0) and _desc(out, 1) with one lookup: the pair every op but
    ragged_all_to_all passes (0.3 us less than two)."""
    seen = _seen()
    key = (a.dtype.num, a.shape, out.dtype.num, out.shape, _local_devices)
    e = seen.get(key)
    if e is None:
        if len(seen) >= 512:
            seen.clear()
        e = seen[key] = (_new_desc(a), _new_desc(out))
    if _local_devices == 1:  # _set_data, inline
        e[0][0].data = _ptr(a)
        e[1][0].data = _ptr(out)
    else:
        _set_data(e[0], a)
        _set_data(e[1], out)
    return e[0][1], e[1][1]


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


def _mesh_ptr(mesh, what, local=False):
    """The mesh pointer of a call `what` (None: the one pushed on this
    thread); a collective's (local=False) only on the context's thread."""
    if local:
        _c()
    else:
        _own(what)
    if mesh is None:
        return None
    if not isinstance(mesh, Mesh):
        _invalid("mesh must be a shmesh.Mesh, got %r" % (mesh,))
    if not mesh._p:
        _invalid("the mesh was destroyed (shmesh.finalize or Mesh.close)")
    return mesh._p


def _group_size(mp, axes, groups, what):
    """n: the size of the groups the call runs in."""
    if groups is not None:
        return groups.group_size
    n = ctypes.c_int()
    rc = lib.shmesh_axis_size(mp, axes, ctypes.byref(n))
    if rc:
        _raise_on(rc, mp, what)
    return n.value


def _with_group_size(v, what, mesh, axis_name, axis_index_groups):
    """For an op whose output shape depends on the group size: the input,
    one device's shape of it, that size, and the call's (mesh pointer, axes
    text, groups reference) for _run, resolved once."""
    a = _prepare(v, what)
    g, gref = _groups(axis_index_groups, what)
    mp, axes = _mesh_ptr(mesh, what), _axes(axis_name, what)
    return a, _shape_of(a, what), _group_size(mp, axes, g, what), (mp, axes, gref)


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


def _call(fn, what, mesh, axis_name, groups_arg, a, out_shape, out_dtype, w, *params):
    """fn (a blocking function of _lib.raw) on a prepared input a, into a new
    array of one device's shape out_shape (a leading axis of K added with K
    devices per rank).  With a list w, its _async form is dispatched
    instead (_dispatch) and the token appended to w."""
    mp = _mesh_ptr(mesh, what)
    axes = _axes(axis_name, what)
    gref = None if groups_arg is None else _groups(groups_arg, what)[1]
    return _run(fn, (mp, axes, gref), a, out_shape, out_dtype, w, params)


# The out= array of the blocking call in progress on this thread (set by
# _interop's wrapper around the call, for one array), which _new_out hands
# out instead of a new one.
_out_slot = threading.local()


def _new_out(shape, dtype, what):
    """The result's array of `shape` and `dtype`: a new one, or the call's
    out= array, checked: exactly that shape and dtype, C-contiguous and
    writable (it is written in place)."""
    o = getattr(_out_slot, "a", None)
    dev = getattr(_out_slot, "device", None)
    if dev is not None:  # a device call (_on_device): the result in device memory
        _out_slot.device = None
        device, kind, made = dev
        r = _device_alloc(shape, dtype, device, kind)
        made.append(r)
        return _header(r._ptr, r.shape, r.dtype)
    if o is None:
        return np.empty(shape, dtype)
    _out_slot.a = None
    shape, dtype = tuple(shape), np.dtype(dtype)
    if o.shape != shape or o.dtype != dtype:
        _invalid("%s: out= must be the result's shape and dtype, %s %s; got %s %s"
                 % (what, dtype, shape, o.dtype, o.shape))
    if not o.flags.c_contiguous or not o.flags.writeable:
        _invalid("%s: out= must be C-contiguous and writable (it is written in place)" % what)
    return o


def _run(fn, where, a, out_shape, out_dtype, w, params):
    """_call's work once `where`, the call's (mesh pointer, axes text,
    groups reference), is resolved."""
    out = _new_out(out_shape if _local_devices == 1 else (_local_devices, *out_shape), out_dtype,
                   "shmesh")
    if w is None:
        rc = fn(*where, *params, *_in_out(a, out))
        if rc:
            _raise_on(rc, where[0])
    else:
        _dispatch(w, fn, (*where, *params, *_in_out(a, out)), (a, out, where[2], params))
    return out


# ---- meshes -------------------------------------------------------------------

class Mesh:
    """A mesh of the job's devices (jax.sharding.Mesh): `devices` an array of
    device ids (np.arange(n).reshape(...) is the default order) whose shape
    gives the axes' sizes, `axis_names` one name per dimension.  Creating one
    is collective: every rank makes the same meshes in the same order.
    ``with mesh:`` makes it the one collectives use when given no mesh."""

    def __init__(self, devices, axis_names):
        devices = np.asarray(devices)
        if isinstance(axis_names, str):
            axis_names = (axis_names,)
        try:
            self.axis_names = tuple(axis_names)
        except TypeError:
            _invalid("Mesh: axis_names must be a name or a tuple of names, got %r"
                     % (axis_names,))
        for d, n in enumerate(self.axis_names):
            if not isinstance(n, str):
                _invalid("Mesh: axis_names[%d] must be a str, got %r" % (d, n))
            if "\0" in n:  # C would read "a\0b" as "a"
                _invalid("Mesh: axis_names[%d] must be a name without NUL characters, got %r"
                         % (d, n))
        if devices.ndim != len(self.axis_names):
            _invalid("Mesh: %d axis names for a devices array of %d dimensions"
                     % (len(self.axis_names), devices.ndim))
        if not np.issubdtype(devices.dtype, np.integer):
            _invalid("Mesh: devices must be device ids (integers), got dtype %s" % devices.dtype)
        self.devices = devices
        ctx = _own("Mesh")
        nd = devices.ndim
        names = (ctypes.c_char_p * nd)(*[n.encode() for n in self.axis_names])
        sizes = (ctypes.c_int * nd)(*devices.shape)
        order = (ctypes.c_int * max(devices.size, 1))(
            *[_cint(i, "Mesh", "device id") for i in devices.ravel()])
        p = ctypes.c_void_p()
        rc = lib.shmesh_mesh_create(ctx, nd, names, sizes, order, ctypes.byref(p))
        if rc:
            _raise(rc, ctx)
        self._p = p
        self._addr = p.value  # for the compiled path (_ext.c)
        self._pushed = 0
        self._shardings = weakref.WeakSet()  # freed before the mesh
        _meshes.add(self)

    @property
    def shape(self):
        return dict(zip(self.axis_names, self.devices.shape))

    @property
    def size(self):
        return int(self.devices.size)

    @property
    def local_devices(self):
        """This rank's device ids in the mesh, in mesh order: with several
        devices per rank, entry i of a collective's leading axis is
        local_devices[i]'s."""
        return _local_devices_of(_mesh_ptr(self, "local_devices", local=True))

    def __enter__(self):
        rc = lib.shmesh_mesh_push(_mesh_ptr(self, "Mesh.__enter__", local=True))
        if rc:
            _raise(rc, None)
        self._pushed += 1
        return self

    def __exit__(self, *exc):
        rc = lib.shmesh_mesh_pop(self._p)
        self._pushed -= 1
        if rc:
            _raise(rc, None)
        return False

    def __repr__(self):
        return "Mesh(%s)" % ", ".join("'%s': %d" % kv for kv in self.shape.items())

    def _destroy(self):
        if self._p:
            for s in list(self._shardings):
                s._destroy()
            while self._pushed > 0:
                lib.shmesh_mesh_pop(self._p)
                self._pushed -= 1
            lib.shmesh_mesh_destroy(self._p)
            self._p = self._addr = None

    def close(self):
        """Frees the mesh now (else at garbage collection or finalize()), and
        the shardings and global arrays made on it."""
        self._destroy()

    def __del__(self):
        if _ctx is not None and getattr(self, "_p", None) and not self._pushed:
            self._destroy()


def axis_index(axis_name, *, mesh=None):
    """This device's index along the named axes (row-major over them); with
    several devices per rank, an int32 array of one index per device
    (Mesh.local_devices order)."""
    mp = _mesh_ptr(mesh, "axis_index", local=True)
    axes = _axes(axis_name, "axis_index")
    i = ctypes.c_int()
    if _local_devices == 1:
        rc = lib.shmesh_axis_index(mp, axes, ctypes.byref(i))
        if rc:
            _raise_on(rc, mp)
        return np.int32(i.value)
    if mp is None:
        mp = lib.shmesh_mesh_current()
        if not mp:
            _invalid("axis_index: no mesh given and none entered (with mesh: ...)")
    out = np.empty(_local_devices, np.int32)
    for j, dev in enumerate(_local_devices_of(mp)):
        rc = lib.shmesh_axis_index_of(mp, axes, dev, ctypes.byref(i))
        if rc:
            _raise(rc, _ctx)
        out[j] = i.value
    return out


def axis_size(axis_name, *, mesh=None):
    """The number of devices along the named axes."""
    n = ctypes.c_int()
    mp = _mesh_ptr(mesh, "axis_size", local=True)
    rc = lib.shmesh_axis_size(mp, _axes(axis_name, "axis_size"), ctypes.byref(n))
    if rc:
        _raise_on(rc, mp)
    return n.value


# ---- the collectives ----------------------------------------------------------
# Every one goes through _call or _perm_call with a function of _lib.raw
# (no declared argument types: arrays and groups by reference, ints
# checked by _cint), one leaf of a pytree at a time.  Each op's body takes
# w: None for the blocking call, a list for its `_async` twin (the same
# checks and output shapes; the tokens of its leaves are appended to w).

_raw = _lib.raw
_ASYNC = {}  # id(a blocking function of _lib.raw) -> its _async form (not hashable)


def _raw_pair(name):
    fn = getattr(_raw, "shmesh_" + name)
    _ASYNC[id(fn)] = getattr(_raw, "shmesh_" + name + "_async")
    return fn


# A pytree's leaves are reduced in buckets of at most this many bytes of one
# dtype (a larger leaf alone).  Not PyTorch DDP's 25 MiB: DDP's gradients
# live in their buckets, where these are copied in, and a 25 MiB bucket
# copied into fresh memory every step was 3.3x slower than one call per
# leaf for ResNet-18's gradients, 1 MiB 4% faster, and 2.1x faster for 100
# leaves of 1 KiB (bench/python_buckets.py, docs/python.md).
BUCKET_BYTES = 1 << 20


def _bucket_bytes(b, what):
    if b is None:
        return 0
    if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 0:
        _invalid("%s: bucket_bytes must be a number of bytes >= 0 (0 or None: one call per "
                 "leaf), got %r" % (what, b))
    return int(b)


def _bucketed(fn, name, result_dtype, x, axis_name, groups, mesh, w, bucket_bytes):
    """An element-wise reduction of pytree x: its leaves of one dtype packed,
    in tree order, into buckets of at most bucket_bytes (a larger leaf goes
    alone, unpacked), one call per bucket; each leaf's result is a view of
    its bucket's.  Every element is reduced as in its own call (the library
    combines every element in group order whatever the array's size), so
    the bits are those of one call per leaf."""
    leaves = []
    index_tree = _tree_map(lambda v: leaves.append(_prepare(v, name)) or len(leaves) - 1, x)
    k = _local_devices
    results = [None] * len(leaves)
    by_dtype = {}
    for i, a in enumerate(leaves):
        _shape_of(a, name)  # the device axis checked first, as per leaf
        by_dtype.setdefault(a.dtype, []).append(i)

    def call(a, shape, dt):
        fast = _COMPILED.get(name) if w is None else None
        if fast is not None:  # the compiled path (a blocking call)
            return fast(a, axis_name, mesh=mesh, axis_index_groups=groups)
        return _call(fn, name, mesh, axis_name, groups, a, shape, result_dtype(dt), w)

    def flush(dt, members):
        if len(members) == 1:
            a = leaves[members[0]]
            results[members[0]] = call(a, _shape_of(a, name), dt)
            return
        parts = [leaves[i].reshape((k, leaves[i].size // k) if k > 1 else leaves[i].size)
                 for i in members]
        flat = np.concatenate(parts, axis=-1)
        total = flat.shape[-1]
        out = call(flat, (total,), dt)
        off = 0
        for i, part in zip(members, parts):
            n = part.shape[-1]
            results[i] = out[..., off:off + n].reshape(leaves[i].shape)
            off += n

    for dt, idx in by_dtype.items():
        members, size = [], 0
        for i in idx:
            nbytes = leaves[i].nbytes
            if members and size + nbytes > bucket_bytes:
                flush(dt, members)
                members, size = [], 0
            members.append(i)
            size += nbytes
        if members:
            flush(dt, members)
    return _tree_map(lambda i: results[i], index_tree)


def _reduce(name, result_dtype):
    fn = _raw_pair(name)

    def body(x, axis_name, axis_index_groups, mesh, bucket_bytes, w):
        if bucket_bytes and type(x) is not np.ndarray:
            return _bucketed(fn, name, result_dtype, x, axis_name, axis_index_groups, mesh, w,
                             bucket_bytes)

        fast = _COMPILED.get(name) if w is None else None

        def leaf(v):
            a = _prepare(v, name)
            if fast is not None:  # the compiled path (a blocking call)
                return fast(a, axis_name, mesh=mesh, axis_index_groups=axis_index_groups)
            return _call(fn, name, mesh, axis_name, axis_index_groups, a, _shape_of(a, name),
                         result_dtype(a.dtype), w)
        return _tree_map(leaf, x)

    def op(x, axis_name, *, axis_index_groups=None, mesh=None, bucket_bytes=BUCKET_BYTES):
        # The hot path of a training loop: one C-contiguous array of a
        # dtype shmesh has, no groups, one device per rank, a live mesh (or
        # none: the entered one).  These are the checks _prepare, _shape_of
        # and _mesh_ptr make, inline: 0.6 us less per call (min), 1 us
        # (median) on this machine.
        if (type(x) is np.ndarray and axis_index_groups is None and _local_devices == 1
                and _ctx is not None and _get_ident() == _owner
                and (mesh is None or (type(mesh) is Mesh and mesh._p))
                and x.dtype in _CODES and x.flags.c_contiguous and x.ndim <= _MAX_NDIM):
            out = _new_out(x.shape, result_dtype(x.dtype), name)
            mp = None if mesh is None else mesh._p
            rc = fn(mp, _axes(axis_name, name), None, *_in_out(x, out))
            if rc:
                _raise_on(rc, mp)
            return out
        if type(x) is np.ndarray:  # one array: no tree to walk
            a = _prepare(x, name)
            return _call(fn, name, mesh, axis_name, axis_index_groups, a, _shape_of(a, name),
                         result_dtype(a.dtype), None)
        return body(x, axis_name, axis_index_groups, mesh, _bucket_bytes(bucket_bytes, name),
                    None)

    def op_async(x, axis_name, *, axis_index_groups=None, mesh=None,
                 bucket_bytes=BUCKET_BYTES):
        return _pending(body, x, axis_name, axis_index_groups, mesh,
                        _bucket_bytes(bucket_bytes, name + "_async"))
    op.__name__ = op.__qualname__ = name
    op_async.__name__ = op_async.__qualname__ = name + "_async"
    return op, op_async


_INT32 = np.dtype(np.int32)


def _sum_dtype(dt):
    return _INT32 if dt.kind == "b" else dt


def _mean_dtype(dt):
    if np.issubdtype(dt, np.floating) or dt == _BF16:
        return dt
    return np.dtype(np.float64) if dt.itemsize == 8 else np.dtype(np.float32)


def _same_dtype(dt):
    return dt


def _async_doc(blocking):
    return ("%s's async form: the same arguments and checks (an error raises here, and nothing "
            "is dispatched); returns a Pending whose block_until_ready() gives %s's result. "
            "The input must not be modified until the work is done." % (blocking, blocking))


psum, psum_async = _reduce("psum", _sum_dtype)
psum.__doc__ = "Sum over the named axes (jax.lax.psum); bool sums to int32."
pmax, pmax_async = _reduce("pmax", _same_dtype)
pmax.__doc__ = "Element-wise maximum over the named axes (jax.lax.pmax)."
pmin, pmin_async = _reduce("pmin", _same_dtype)
pmin.__doc__ = "Element-wise minimum over the named axes (jax.lax.pmin)."
pmean, pmean_async = _reduce("pmean", _mean_dtype)
pmean.__doc__ = ("Mean over the named axes (jax.lax.pmean); integer inputs give float32 "
                 "(float64 for 64-bit ones).")


def _argreduce(name):
    fn = _raw_pair(name)

    def body(x, axis_name, mesh, w):
        def leaf(v):
            a = _prepare(v, name)
            return _call(fn, name, mesh, axis_name, None, a, _shape_of(a, name), _INT32, w)
        return _tree_map(leaf, x)

    def op(x, axis_name, *, mesh=None):
        return body(x, axis_name, mesh, None)

    def op_async(x, axis_name, *, mesh=None):
        return _pending(body, x, axis_name, mesh)
    op.__name__ = op.__qualname__ = name
    op_async.__name__ = op_async.__qualname__ = name + "_async"
    return op, op_async


pargmax, pargmax_async = _argreduce("pargmax")
pargmax.__doc__ = "The axis index holding the maximum, element-wise (int32; one axis)."
pargmin, pargmin_async = _argreduce("pargmin")
pargmin.__doc__ = "The axis index holding the minimum, element-wise (int32; one axis)."

# The compiled per-call path (shmesh/_ext.c): each of these functions
# becomes a callable that takes the common case in C (one contiguous numpy
# array, one axis name, no groups, one device per rank) and hands anything
# else to the Python function above, unchanged.  None: the ctypes path alone.
_ext = _lib.load_ext()
compiled = _ext is not None
_COMPILED = {}  # name -> the compiled callable, for pytrees' leaves and buckets


def _address(name):
    return ctypes.cast(getattr(_raw, name), ctypes.c_void_p).value


# ---- arrays of other libraries: DLPack, PyTorch ------------------------------

_KDL_CPU = 1  # DLPack's kDLCPU


_BACKS = {}  # type -> _back_to's answer


def _back_to(v):
    """How a result goes back to v's kind of array: torch.from_numpy for a
    torch tensor (no copy; it takes bool, which DLPack does not), else the
    producer's package's from_dlpack where it has one, else nothing (the
    result stays a numpy array)."""
    tp = type(v)
    try:
        return _BACKS[tp]
    except KeyError:
        pass
    top = tp.__module__.split(".")[0]
    mod = sys.modules.get(top)
    back = getattr(mod, "from_dlpack", None)
    if top == "torch" and mod is not None:
        back = mod.from_numpy
    if len(_BACKS) < 64:
        _BACKS[tp] = back
    return back


# ---- device memory through DLPack ---------------------------------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DL_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", _DL_DELETER)]


_KDL_DEVICES = {2: "CUDA", 10: "ROCm"}  # DLPack's kDLCUDA, kDLROCM: the device path's
# DLPack's (type code, bits) of the dtypes shmesh has (kDLInt 0, kDLUInt 1,
# kDLFloat 2, kDLBool 6), and back.
_DL_TYPES = {(0, 8): np.int8, (0, 16): np.int16, (0, 32): np.int32, (0, 64): np.int64,
             (1, 8): np.uint8, (1, 16): np.uint16, (1, 32): np.uint32, (1, 64): np.uint64,
             (2, 16): np.float16, (2, 32): np.float32, (2, 64): np.float64, (6, 8): np.bool_}
_DL_CODES = {np.dtype(t): k for k, t in _DL_TYPES.items()}
_DLTENSOR = b"dltensor"  # the capsules' name (kept: a capsule keeps only its pointer)
_pyapi = ctypes.pythonapi
_pyapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_pyapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_pyapi.PyCapsule_IsValid.restype = ctypes.c_int
_pyapi.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# The same function on a capsule's address: in a capsule's destructor, where
# the capsule (at no references) must not be made a Python object again.
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _pyapi))
_pyapi.PyCapsule_New.restype = ctypes.py_object
_pyapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]


def _header(ptr, shape, dtype):
    """A numpy array over `ptr` (device memory: never read here, only its
    address and shape handed to the library)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if n == 0 or not ptr:
        return np.empty(shape, dtype)
    return np.frombuffer((ctypes.c_char * n).from_address(ptr), dtype).reshape(shape)


def _device_view(v, what):
    """A DLPack tensor in device memory as a numpy header over it (_header)
    and its device id; the capsule is held (its producer keeps the memory)
    for as long as the header lives."""
    cap = v.__dlpack__()
    m = _DLManagedTensor.from_address(_pyapi.PyCapsule_GetPointer(cap, _DLTENSOR))
    t = m.dl_tensor
    dt = _DL_TYPES.get((t.dtype.code, t.dtype.bits)) if t.dtype.lanes == 1 else None
    if dt is None:
        _invalid("%s: a device tensor of DLPack type code %d, %d bits, %d lanes: not a dtype "
                 "shmesh has (bool, int8..int64, uint8..uint64, float16, float32, float64)"
                 % (what, t.dtype.code, t.dtype.bits, t.dtype.lanes))
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides:
        want, size = [], 1
        for n in reversed(shape):
            want.insert(0, size)
            size *= n
        if any(t.strides[i] != want[i] for i in range(t.ndim) if shape[i] > 1):
            _invalid("%s: a device tensor that is not contiguous (strides %s, shape %s): pass "
                     "x.contiguous()" % (what, [t.strides[i] for i in range(t.ndim)],
                                          list(shape)))
    a = _header((t.data or 0) + t.byte_offset, shape, dt)
    _device_keep[id(a)] = (cap, v)
    weakref.finalize(a, _device_keep.pop, id(a), None)
    return a, int(t.device.device_id)


_device_keep = {}  # id(header) -> (capsule, producer), while the header lives
_exports = {}      # address of an exported DLManagedTensor -> what it holds


@_DL_DELETER
def _dl_deleter(p):
    """The consumer is done with an exported tensor."""
    _exports.pop(p, None)


@_CAPSULE_DESTRUCTOR
def _dl_capsule_gone(cap):
    """An exported capsule freed: not consumed (still named "dltensor"),
    its tensor is released here."""
    if _pyapi.PyCapsule_IsValid(cap, _DLTENSOR):
        _exports.pop(_capsule_pointer(cap, _DLTENSOR), None)


class DeviceArray:
    """An array in a GPU runtime's device memory (a result of a collective
    on a DLPack device tensor, or device_array()): DLPack exports it
    (torch.from_dlpack and the like take it without a copy), numpy() copies
    it to the host.  Freed with its last reference (and at finalize)."""

    __slots__ = ("_ptr", "shape", "dtype", "_device", "_gen", "__weakref__")

    def __init__(self, ptr, shape, dtype, device):
        self._ptr, self.shape, self.dtype = ptr, tuple(shape), np.dtype(dtype)
        self._device = device  # (DLPack device type, this process's device number)
        self._gen = _gen

    @property
    def nbytes(self):
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def __dlpack_device__(self):
        return self._device

    def __dlpack__(self, stream=None):
        self._live("__dlpack__")
        shape = (ctypes.c_int64 * max(len(self.shape), 1))(*self.shape)
        code, bits = _DL_CODES[self.dtype]
        m = _DLManagedTensor(_DLTensor(self._ptr, _DLDevice(*self._device), len(self.shape),
                                       _DLDataType(code, bits, 1), shape, None, 0),
                             None, _dl_deleter)
        p = ctypes.addressof(m)
        _exports[p] = (m, shape, self)  # until the consumer calls the deleter
        return _pyapi.PyCapsule_New(p, _DLTENSOR, _dl_capsule_gone)

    def _live(self, what):
        if self._gen != _gen or not self._ptr and self.nbytes:
            _invalid("DeviceArray.%s: its memory went with the context (finalize)" % what)

    def numpy(self):
        """A host copy (shmesh_device_copy)."""
        self._live("numpy")
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            _checked(lib.shmesh_device_copy, _c(), out.ctypes.data, self._ptr, self.nbytes)
        return out

    def __repr__(self):
        return "DeviceArray(shape=%r, dtype=%s, device=%r)" % (self.shape, self.dtype,
                                                              self._device)

    def __del__(self):
        try:
            if self._ptr and _ctx is not None and self._gen == _gen:
                lib.shmesh_device_free(_ctx, self._ptr)
        except Exception:  # at interpreter exit, the module may be half gone
            pass


def device_array(x, device=0, *, kind=2):
    """x (a numpy array) copied into device memory of this process's GPU
    `device` (shmesh_device_alloc: the runtime's own allocator), as a
    DeviceArray; kind: its DLPack device type (2, CUDA; 10, ROCm)."""
    a = np.ascontiguousarray(x)
    if a.dtype not in _DL_CODES:
        _invalid("device_array: dtype %s is not one the device path takes" % a.dtype)
    r = _device_alloc(a.shape, a.dtype, _cint(device, "device_array", "device"), kind)
    if a.nbytes:
        _checked(lib.shmesh_device_copy, _c(), r._ptr, a.ctypes.data, a.nbytes)
    return r


def _device_alloc(shape, dtype, device, kind):
    n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    p = ctypes.c_void_p()
    if n:
        _checked(lib.shmesh_device_alloc, _c(), device, n, ctypes.byref(p))
    return DeviceArray(p.value, shape, dtype, (kind, device))


def _from_foreign(v, what):
    """A leaf that is not a numpy array as one, without a copy where it can
    be: DLPack (__dlpack__, numpy's from_dlpack) for CPU tensors, else
    numpy's own conversion (the buffer protocol, __array_interface__,
    __array__: torch's bool tensors, which DLPack does not carry).  With the
    function that turns a result back into v's kind, or None.  A torch
    tensor is asked the same through its own attributes, which cost less
    than its __dlpack_device__ (1.7 us)."""
    if type(v).__module__ == "torch":
        if not v.is_cpu:
            _invalid("%s: a torch tensor on %s: only CPU tensors are taken so far (x.cpu())"
                     % (what, v.device))
        if v.requires_grad:
            _invalid("%s: a tensor that requires grad; pass x.detach() (gradients do not flow "
                     "through shmesh's collectives)" % what)
        return v.numpy(), _back_to(v)  # its memory, as numpy (bool too)
    dev = getattr(v, "__dlpack_device__", None)
    if dev is not None and hasattr(v, "__dlpack__"):
        kind = int(dev()[0])
        if kind != _KDL_CPU:
            _invalid("%s: a DLPack tensor on device type %d (%s): pass device tensors alone, "
                     "not in a pytree nor with out=" % (what, kind,
                                                        _KDL_DEVICES.get(kind, "not a GPU")))
        if getattr(v, "requires_grad", False):
            _invalid("%s: a tensor that requires grad; pass x.detach() (gradients do not flow "
                     "through shmesh's collectives)" % what)
        try:
            return np.from_dlpack(v), _back_to(v)
        except (RuntimeError, BufferError, TypeError):
            pass  # a dtype DLPack does not carry: numpy's own conversion below
    return np.asarray(v), _back_to(v) if dev is not None else None


def _interop(fn):
    """fn (a collective's Python function, x its first argument) taking
    pytrees whose leaves are other libraries' arrays too: each such leaf
    goes in as a numpy array sharing its memory (_from_foreign), and its
    result comes back as its kind (a torch tensor for a torch tensor,
    sharing the result's memory)."""
    @functools.wraps(fn)
    def op(x, *args, out=None, **kw):
        if out is not None:
            return _into(fn, out, x, args, kw)
        if type(x) is np.ndarray:
            return fn(x, *args, **kw)
        if hasattr(x, "__dlpack_device__") and int(x.__dlpack_device__()[0]) in _KDL_DEVICES:
            return _on_device(fn, x, args, kw)
        if hasattr(x, "__dlpack__"):  # one tensor: no tree to walk
            a, back = _from_foreign(x, fn.__name__)
            r = _COMPILED.get(fn.__name__, fn)(a, *args, **kw)
            return r if back is None else back(r)
        backs = []

        def take(v):
            if isinstance(v, (np.ndarray, np.generic, int, float, bool, complex)):
                backs.append(None)
                return v
            a, back = _from_foreign(v, fn.__name__)
            backs.append(back)
            return a
        x2 = _tree_map(take, x)
        if not any(backs):
            return fn(x2, *args, **kw)
        r = _COMPILED.get(fn.__name__, fn)(x2, *args, **kw)
        it = iter(backs)
        return _tree_map(lambda out: (lambda b: out if b is None else b(out))(next(it)), r)
    return op


def _on_device(fn, x, args, kw):
    """fn's call on a DLPack tensor in GPU memory: the device path, its
    result a DeviceArray on the same device (given back to x's kind through
    its package's from_dlpack where it has one)."""
    name = fn.__name__
    kind = int(x.__dlpack_device__()[0])
    if getattr(x, "requires_grad", False):
        _invalid("%s: a tensor that requires grad; pass x.detach() (gradients do not flow "
                 "through shmesh's collectives)" % name)
    a, device = _device_view(x, name)
    made = []
    _out_slot.device = (device, kind, made)
    try:
        fn(a, *args, **kw)
    finally:
        _out_slot.device = None
    r = made[0]
    # (for torch too: torch.from_dlpack, as torch.from_numpy takes host memory only)
    back = getattr(sys.modules.get(type(x).__module__.split(".")[0]), "from_dlpack", None)
    return r if back is None else back(r)


def _into(fn, out, x, args, kw):
    """fn's call with out=: the result written into `out` (a numpy array, or
    a tensor whose memory a numpy array shares), which is returned."""
    name = fn.__name__
    if isinstance(x, (dict, list, tuple)):
        _invalid("%s: out= takes the result of one array, not of a pytree" % name)
    o = out
    if type(out) is not np.ndarray:
        if not hasattr(out, "__dlpack__") and not hasattr(out, "__array_interface__"):
            _invalid("%s: out= must be an array (numpy, or a tensor on the CPU), got %s"
                     % (name, type(out).__name__))
        o = _from_foreign(out, name)[0]
    if type(x) is not np.ndarray and (hasattr(x, "__dlpack__") or
                                      hasattr(x, "__array_interface__")):
        x = _from_foreign(x, name)[0]
    _out_slot.a = o
    try:
        fn(x, *args, **kw)
    finally:
        _out_slot.a = None
    return out


def _compiled(op, kind, rule, kws):
    op = _interop(op)
    if _ext is None:
        return op
    c = _COMPILED[op.__name__] = _ext.Collective(
        _address("shmesh_" + op.__name__), kind, rule, kws, op, _raise_on, globals(),
        _address("shmesh_axis_size"))
    return c


# _ext.c's enum kind
_REDUCE, _ALL_GATHER, _PSUM_SCATTER, _ALL_TO_ALL, _PSWAPAXES, _PPERMUTE, _PSHUFFLE, \
    _PBROADCAST = range(8)
_SAME, _SUM, _MEAN, _INDEX = range(4)  # its enum rule
_KW_GROUPS, _KW_BUCKET = 1, 2        # and its keywords
psum = _compiled(psum, _REDUCE, _SUM, _KW_GROUPS | _KW_BUCKET)
pmax = _compiled(pmax, _REDUCE, _SAME, _KW_GROUPS | _KW_BUCKET)
pmin = _compiled(pmin, _REDUCE, _SAME, _KW_GROUPS | _KW_BUCKET)
pmean = _compiled(pmean, _REDUCE, _MEAN, _KW_GROUPS | _KW_BUCKET)
pargmax = _compiled(pargmax, _REDUCE, _INDEX, 0)
pargmin = _compiled(pargmin, _REDUCE, _INDEX, 0)

# Every blocking function of the table with an _async form, paired with it
# (the rest of the wrappers use _lib.raw's functions directly).
for _o in OPS:
    if _o.has_async and _o.sig != "internal":
        _raw_pair(_o.name)


def _all_gather(x, axis_name, axis_index_groups, axis, tiled, mesh, w):
    def leaf(v):
        a, sh, n, where = _with_group_size(v, "all_gather", mesh, axis_name, axis_index_groups)
        shape = list(sh)
        if tiled:
            ax = _axis(axis, len(sh), "all_gather")
            shape[ax] *= n
        else:
            ax = _axis(axis, len(sh) + 1, "all_gather")
            shape.insert(ax, n)
        return _run(_raw.shmesh_all_gather, where, a, shape, a.dtype, w,
                    (ax, ctypes.c_bool(tiled)))
    return _tree_map(leaf, x)


def all_gather(x, axis_name, *, axis_index_groups=None, axis=0, tiled=False, mesh=None):
    """The group's inputs stacked along a new dimension `axis` (or
    concatenated along it with tiled=True), as jax.lax.all_gather."""
    return _all_gather(x, axis_name, axis_index_groups, axis, tiled, mesh, None)


def all_gather_async(x, axis_name, *, axis_index_groups=None, axis=0, tiled=False, mesh=None):
    return _pending(_all_gather, x, axis_name, axis_index_groups, axis, tiled, mesh)


def _psum_scatter(x, axis_name, scatter_dimension, axis_index_groups, tiled, mesh, w):
    def leaf(v):
        a, sh, n, where = _with_group_size(v, "psum_scatter", mesh, axis_name, axis_index_groups)
        d = _axis(scatter_dimension, len(sh), "psum_scatter", "scatter_dimension")
        shape = list(sh)
        if tiled:
            shape[d] = shape[d] // n if n else 0
        else:
            del shape[d]
        return _run(_raw.shmesh_psum_scatter, where, a, shape, _sum_dtype(a.dtype), w,
                    (d, ctypes.c_bool(tiled)))
    return _tree_map(leaf, x)


def psum_scatter(x, axis_name, *, scatter_dimension=0, axis_index_groups=None, tiled=False,
                 mesh=None):
    """The psum, block p of it (along scatter_dimension) to group index p
    (jax.lax.psum_scatter)."""
    return _psum_scatter(x, axis_name, scatter_dimension, axis_index_groups, tiled, mesh, None)


def psum_scatter_async(x, axis_name, *, scatter_dimension=0, axis_index_groups=None,
                       tiled=False, mesh=None):
    return _pending(_psum_scatter, x, axis_name, scatter_dimension, axis_index_groups, tiled,
                    mesh)


def _all_to_all(x, axis_name, split_axis, concat_axis, axis_index_groups, tiled, mesh, w):
    def leaf(v):
        a, sh, n, where = _with_group_size(v, "all_to_all", mesh, axis_name, axis_index_groups)
        s = _axis(split_axis, len(sh), "all_to_all", "split_axis")
        c = _axis(concat_axis, len(sh), "all_to_all", "concat_axis")
        shape = list(sh)
        if tiled:
            shape[s] = shape[s] // n if n else 0
            shape[c] *= n
        else:
            del shape[s]
            shape.insert(c, n)
        return _run(_raw.shmesh_all_to_all, where, a, shape, a.dtype, w,
                    (s, c, ctypes.c_bool(tiled)))
    return _tree_map(leaf, x)


def all_to_all(x, axis_name, split_axis, concat_axis, *, axis_index_groups=None, tiled=False,
               mesh=None):
    """Block j along split_axis to group index j, received blocks placed along
    concat_axis (jax.lax.all_to_all)."""
    return _all_to_all(x, axis_name, split_axis, concat_axis, axis_index_groups, tiled, mesh,
                       None)


def all_to_all_async(x, axis_name, split_axis, concat_axis, *, axis_index_groups=None,
                     tiled=False, mesh=None):
    return _pending(_all_to_all, x, axis_name, split_axis, concat_axis, axis_index_groups,
                    tiled, mesh)


all_gather = _compiled(all_gather, _ALL_GATHER, _SAME, _KW_GROUPS)
psum_scatter = _compiled(psum_scatter, _PSUM_SCATTER, _SUM, _KW_GROUPS)
all_to_all = _compiled(all_to_all, _ALL_TO_ALL, _SAME, _KW_GROUPS)


def _pswapaxes(x, axis_name, axis, axis_index_groups, mesh, w):
    ax = _cint(axis, "pswapaxes", "axis")

    def leaf(v):
        a = _prepare(v, "pswapaxes")
        return _call(_raw.shmesh_pswapaxes, "pswapaxes", mesh, axis_name, axis_index_groups, a,
                     _shape_of(a, "pswapaxes"), a.dtype, w, ax)
    return _tree_map(leaf, x)


def pswapaxes(x, axis_name, axis, *, axis_index_groups=None, mesh=None):
    """Swaps the named axis with dimension `axis` (jax.lax.pswapaxes)."""
    return _pswapaxes(x, axis_name, axis, axis_index_groups, mesh, None)


def pswapaxes_async(x, axis_name, axis, *, axis_index_groups=None, mesh=None):
    return _pending(_pswapaxes, x, axis_name, axis, axis_index_groups, mesh)


def _perm_call(fn, what, x, axis_name, mesh, params, w):
    """fn(mesh, axes, *params, in, out) on every leaf: out the input's shape
    (its _async form with a list w, as _call)."""
    def leaf(v):
        a = _prepare(v, what)
        mp = _mesh_ptr(mesh, what)
        _shape_of(a, what)
        out = _new_out(a.shape, a.dtype, what)
        if w is None:
            rc = fn(mp, _axes(axis_name, what), *params, *_in_out(a, out))
            if rc:
                _raise_on(rc, mp)
        else:
            _dispatch(w, fn, (mp, _axes(axis_name, what), *params, *_in_out(a, out)),
                      (a, out, params))
        return out
    return _tree_map(leaf, x)


def _ppermute(x, axis_name, perm, mesh, w):
    try:
        pairs = [(_cint(s, "ppermute", "perm"), _cint(d, "ppermute", "perm")) for s, d in perm]
    except InvalidArgument:
        raise  # _cint's: an entry out of range
    except (TypeError, ValueError):
        _invalid("ppermute: perm must be a list of (source, destination) pairs, got %r" % (perm,))
    flat = (ctypes.c_int * max(2 * len(pairs), 2))(*[i for p in pairs for i in p])
    return _perm_call(_raw.shmesh_ppermute, "ppermute", x, axis_name, mesh, (flat, len(pairs)), w)


def ppermute(x, axis_name, perm, *, mesh=None):
    """Sends each (source, destination) pair's input along (jax.lax.ppermute);
    a device that is no destination gets zeros."""
    return _ppermute(x, axis_name, perm, mesh, None)


def ppermute_async(x, axis_name, perm, *, mesh=None):
    return _pending(_ppermute, x, axis_name, perm, mesh)


def _pshuffle(x, axis_name, perm, mesh, w):
    try:
        p = [_cint(i, "pshuffle", "perm") for i in perm]
    except TypeError:
        _invalid("pshuffle: perm must be a list of axis indices, got %r" % (perm,))
    # the C call reads as many entries as the axis has: check the length here
    n = _group_size(_mesh_ptr(mesh, "pshuffle"), _axes(axis_name, "pshuffle"), None, "pshuffle")
    if len(p) != n:
        _invalid("pshuffle: perm has %d entries, the axes %r have %d devices: it must be a "
                 "permutation of 0..%d" % (len(p), axis_name, n, n - 1))
    arr = (ctypes.c_int * max(len(p), 1))(*p)
    return _perm_call(_raw.shmesh_pshuffle, "pshuffle", x, axis_name, mesh, (arr,), w)


def pshuffle(x, axis_name, perm, *, mesh=None):
    """Group index i receives the input of group index perm[i] (jax.lax.pshuffle)."""
    return _pshuffle(x, axis_name, perm, mesh, None)


def pshuffle_async(x, axis_name, perm, *, mesh=None):
    return _pending(_pshuffle, x, axis_name, perm, mesh)


def _pbroadcast(x, axis_name, source, mesh, w):
    return _perm_call(_raw.shmesh_pbroadcast, "pbroadcast", x, axis_name, mesh,
                      (_cint(source, "pbroadcast", "source"),), w)


def pbroadcast(x, axis_name, source, *, mesh=None):
    """Every device of the group gets the input of group index `source`."""
    return _pbroadcast(x, axis_name, source, mesh, None)


def pbroadcast_async(x, axis_name, source, *, mesh=None):
    return _pending(_pbroadcast, x, axis_name, source, mesh)


pswapaxes = _compiled(pswapaxes, _PSWAPAXES, _SAME, _KW_GROUPS)
ppermute = _compiled(ppermute, _PPERMUTE, _SAME, 0)
pshuffle = _compiled(pshuffle, _PSHUFFLE, _SAME, 0)
pbroadcast = _compiled(pbroadcast, _PBROADCAST, _SAME, 0)


def _ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes,
                       axis_name, axis_index_groups, mesh, w):
    what = "ragged_all_to_all"
    a = _prepare(operand, what)
    out = np.array(_prepare(output, what), copy=True)
    ints = [_prepare(v, what) for v in (input_offsets, send_sizes, output_offsets, recv_sizes)]
    for v in [a, out] + ints:
        _shape_of(v, what)
    mp = _mesh_ptr(mesh, what)
    gref = None if axis_index_groups is None else _groups(axis_index_groups, what)[1]
    refs = [_desc(a, 0), _desc(out, 1)] + [_desc(v, 2 + i) for i, v in enumerate(ints)]
    if w is None:
        rc = _raw.shmesh_ragged_all_to_all(mp, _axes(axis_name, what), gref, *refs)
        if rc:
            _raise_on(rc, mp)
    else:
        _dispatch(w, _raw.shmesh_ragged_all_to_all, (mp, _axes(axis_name, what), gref, *refs),
                  (a, out, ints, gref))
    return out


def ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, *,
                      axis_name, axis_index_groups=None, mesh=None):
    """jax.lax.ragged_all_to_all: a new array, `output` with the rows received
    written into it (output itself is not changed)."""
    return _ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets,
                              recv_sizes, axis_name, axis_index_groups, mesh, None)


def ragged_all_to_all_async(operand, output, input_offsets, send_sizes, output_offsets,
                            recv_sizes, *, axis_name, axis_index_groups=None, mesh=None):
    return _pending(_ragged_all_to_all, operand, output, input_offsets, send_sizes,
                    output_offsets, recv_sizes, axis_name, axis_index_groups, mesh)




def ops():
    """The library's op table (shmesh_op_get): a tuple of Op(name, code,
    scope, sig, has_async, bool_input, bus, params), in the table's order."""
    return OPS


# The collectives the package offers are the table's mesh ops and their
# _async forms: each has its wrapper above (its Python signature is written
# by hand), and tests/check_ops.py fails when the wrappers and the table
# differ.  The table's world-wide ops are offered as named here (None: not
# offered, with why), and the same test checks that this lists them all.
_MESH_OPS = tuple(o.name for o in OPS if o.scope == "mesh")
_ASYNC_FORMS = tuple(o.name + "_async" for o in OPS if o.scope == "mesh" and o.has_async)
_WORLD_OPS = {
    "barrier": "barrier",
    "world_sum": None,               # psum over a mesh of every rank does it
    "finalize": "finalize",
    "mesh_create": "Mesh",
    "world_gather": None,            # the library's own (no public function)
    "world_broadcast": None,         # the library's own (no public function)
    "global_array_gather": "GlobalArray.gather",
    "global_array_scatter": "device_put",
    "global_array_reshard": "device_put",
    "effect_create": "Effect",
    "callback": "callback",
}
for _name in _ASYNC_FORMS:
    if _name in globals() and _name[:-6] in globals():
        globals()[_name].__doc__ = _async_doc(_name[:-6])
__all__ += list(_MESH_OPS) + list(_ASYNC_FORMS)


# ---- async dispatch and tokens ------------------------------------------------
# The library owns an async call's buffers until its token is done, so
# Python must not free them before, even when the caller drops the Pending:
# each dispatch's Token holds what the call uses (input, output, groups,
# parameters; a callback's function and arguments) and stays in _registry
# until it is seen done (_register tests the oldest at each dispatch: work
# finishes in dispatch order) or finalize() waited for it.  The descriptors
# themselves (shmesh_array, shmesh_groups, perm arrays) are copied by the
# library at dispatch (flow_init in lib/engine/flow.c, the call's scratch in
# lib/ops/permute.c, struct ragged in lib/ops/ragged.c), so the per-thread
# structs of _in_out and _desc may be reused by the next call at once.

class CallbackError(Error):
    """A function run by shmesh.callback raised: `exception` is what it
    raised (also the __cause__), `device` the device whose part it was."""

    def __init__(self, message, exception=None, device=None):
        super().__init__(message)
        self.exception = exception
        self.device = device


def _callback_error(fn, exc, device, more=0):
    name = getattr(fn, "__qualname__", None) or repr(fn)
    err = CallbackError("callback %s raised on rank %d (device %d): %s: %s%s"
                        % (name, _rank, device, type(exc).__name__, exc,
                           " (and %d more callbacks failed)" % more if more else ""),
                        exc, device)
    err.__cause__ = exc
    return err


class Token:
    """A position in this process's dispatch queue (shmesh_token, JAX's
    RuntimeToken): done once that work and everything dispatched before it
    finished.  A value: copy it, wait on it twice, drop it."""

    __slots__ = ("_t", "_gen", "_keep", "_cb", "_failed", "_exc")

    def __init__(self, t=None, keep=None):
        self._t = _lib.Token() if t is None else t
        self._gen = _gen
        self._keep = keep      # what the library uses until done (_registry)
        self._cb = 0           # its callback's key in _cb_records (0: none)
        self._failed = None    # (code, sentence), once seen failed by _register or _drain
        self._exc = None       # (fn, exception, device): the callback raised

    def _live(self):
        """Whether the library still knows the token (not done with no work,
        nor of a finalized context)."""
        return self._t.ctx is not None and self._gen == _gen

    def _check(self):
        """Raises what the token's work failed with, seen earlier."""
        if self._failed is not None:
            rc, text = self._failed
            raise _ERRORS.get(rc, Error)(text, rc)
        if self._exc is not None:
            raise _callback_error(*self._exc)

    def wait(self):
        """Blocks until done; raises the work's failure (a shmesh.Error
        subclass with the library's sentence, or CallbackError for a
        callback that raised)."""
        if self._live():
            rc = lib.shmesh_token_wait(self._t)
            if rc:
                _raise(rc, self._t.ctx)
        self._check()

    def is_ready(self):
        """Never blocks: True once done, False before; raises as wait()."""
        if self._live():
            rc = lib.shmesh_token_test(self._t)
            if rc == 0:
                return False
            if rc < 0:
                _raise(rc, self._t.ctx)
        self._check()
        return True

    def __copy__(self):
        return self  # a value that never changes once dispatched

    def __deepcopy__(self, memo):
        return self

    def __repr__(self):
        if not self._live():
            state = "failed" if self._failed or self._exc else "done"
        else:
            rc = lib.shmesh_token_test(self._t)
            state = ("pending" if rc == 0 else "done" if rc > 0 and not self._exc else
                     "failed: %s" % (_ERRORS.get(rc, Error).__name__ if rc < 0 else
                                     "callback raised"))
        return "Token(seq=%d, %s)" % (self._t.seq, state)


_registry = collections.deque()  # Tokens of work not yet seen done, oldest first
_registry_lock = threading.Lock()


def _last_error(ctx):
    text = lib.shmesh_last_error(ctx)
    return text.decode(errors="replace") if text else ""


def _release(tok):
    tok._keep = None
    if tok._cb:
        _cb_records.pop(tok._cb, None)


def _register(tok):
    """Keeps tok's work alive in _registry; releases what done work held."""
    with _registry_lock:
        _registry.append(tok)
        while _registry:
            old = _registry[0]
            rc = lib.shmesh_token_test(old._t) if old._live() else 1
            if rc == 0:
                break  # the oldest is not done: neither are the later ones (dispatch order)
            if rc < 0:
                old._failed = (rc, _last_error(old._t.ctx) or
                               (lib.shmesh_strerror(rc) or b"").decode())
            _release(old)
            _registry.popleft()


def _drain():
    """finalize(): waits for every pending dispatch, keeping each failure
    for its token (the context goes: tokens cannot ask it later)."""
    with _registry_lock:
        pending = list(_registry)
        _registry.clear()
    for tok in pending:
        if tok._live():
            rc = lib.shmesh_token_wait(tok._t)
            if rc:
                tok._failed = (rc, _last_error(tok._t.ctx) or
                               (lib.shmesh_strerror(rc) or b"").decode())
        _release(tok)


def _dispatch(w, fn, args, keep):
    """The _async form of fn (a blocking function of _lib.raw) on args and a
    new token, which keeps `keep` alive until done and is appended to w."""
    tok = Token(None, keep)
    rc = _ASYNC[id(fn)](*args, ctypes.byref(tok._t))
    if rc:
        _raise_on(rc, args[0])  # nothing was dispatched
    _register(tok)
    w.append(tok)




class Pending:
    """The result of an async collective (JAX's async dispatch):
    block_until_ready() waits and returns what the blocking function
    returns; `token` is its Token (of its last array, for a pytree: the
    earlier ones are done before it)."""

    __slots__ = ("_result", "_tokens")

    def __init__(self, result, tokens):
        self._result = result
        self._tokens = tokens

    @property
    def token(self):
        return self._tokens[-1] if self._tokens else Token()

    def block_until_ready(self):
        """Waits for the work (raising its failure) and returns the result."""
        if len(self._tokens) == 1:
            self._tokens[0].wait()
        else:
            wait_all(self._tokens)
        return self._result

    def is_ready(self):
        """Never blocks: whether the work is done (raises its failure)."""
        return all(t.is_ready() for t in self._tokens)

    def __repr__(self):
        return "Pending(%r)" % (self.token,)


def _pending(body, *args):
    """body(*args, w) with a list w: the Pending of the tokens it dispatched."""
    w = []
    return Pending(body(*args, w), w)


def barrier_async():
    """barrier's async form: a Pending whose result is None."""
    w = []
    _dispatch(w, _raw.shmesh_barrier, (_own("barrier_async"),), None)
    return Pending(None, w)


def _tokens_of(items, what):
    toks = []
    for x in items:
        if isinstance(x, Token):
            toks.append(x)
        elif isinstance(x, Pending):
            toks.extend(x._tokens)
        else:
            _invalid("%s: expected Tokens or Pendings, got %r" % (what, x))
    return toks


def wait_all(tokens):
    """Waits for every Token (or Pending) of the list: raises the failure of
    the first failed one in dispatch order (shmesh_token_wait_all)."""
    toks = _tokens_of(tokens, "wait_all")
    live = [t for t in toks if t._live()]
    if live:
        arr = (_lib.Token * len(live))(*[t._t for t in live])
        rc = lib.shmesh_token_wait_all(len(live), arr)
        if rc:
            _raise(rc, live[0]._t.ctx)
    for t in toks:
        t._check()


def wait_any(tokens):
    """Waits until one of the Tokens (or Pendings, by their last token) is
    done: its index in the list (the earliest in dispatch order); raises its
    failure (shmesh_token_wait_any)."""
    toks = []
    for x in tokens:
        if isinstance(x, Pending):
            x = x.token
        elif not isinstance(x, Token):
            _invalid("wait_any: expected Tokens or Pendings, got %r" % (x,))
        toks.append(x)
    if not toks:
        _invalid("wait_any: no tokens to wait for")
    for i, t in enumerate(toks):
        if not t._live():
            t._check()
            return i
    arr = (_lib.Token * len(toks))(*[t._t for t in toks])
    index = ctypes.c_int(-1)
    rc = lib.shmesh_token_wait_any(len(toks), arr, ctypes.byref(index))
    if rc:
        _raise(rc, toks[0]._t.ctx)
    toks[index.value]._check()
    return index.value


def runtime_token():
    """The Token of everything this thread dispatched so far (JAX's
    RuntimeToken; shmesh_runtime_token): done when it dispatched nothing."""
    return Token(lib.shmesh_runtime_token(_c()))


# ---- effects and callbacks ----------------------------------------------------

_KINDS = {"unordered": 0, "ordered": 1, "ordered_shardable": 2}


class Effect:
    """A registered effect (JAX's effect types; shmesh_effect_create), for
    shmesh.callback: kind "unordered" (no order beyond dispatch order),
    "ordered" (its callbacks run one after the other in program order; each
    placed on one device) or "ordered_shardable" (every device runs its
    part; program point k finishes on every rank before k+1 starts).
    Collective: every rank creates the same effects in the same order; at
    most 32 per context, which owns them (freed by finalize())."""

    def __init__(self, name, kind):
        if not isinstance(name, str):
            _invalid("Effect: name must be a str, got %r" % (name,))
        if "\0" in name:  # C would read "e\0x" as "e"
            _invalid("Effect: name %r holds a NUL character: a name is 1 to %d printable "
                     "characters" % (name, _lib.MAX_EFFECT_NAME))
        if kind not in _KINDS:
            _invalid("Effect: kind must be one of %s, got %r" % (", ".join(_KINDS), kind))
        ctx = _own("Effect")
        p = ctypes.c_void_p()
        rc = lib.shmesh_effect_create(ctx, name.encode(), _KINDS[kind], ctypes.byref(p))
        if rc:
            _raise(rc, ctx)
        self._p = p
        self._gen = _gen
        self.name = name
        self.kind = kind

    def _ptr(self):
        if _fork_parent is not None:
            raise InvalidArgument(_fork_sentence("Effect %r" % self.name), -1)
        if self._gen != _gen or _ctx is None:
            _invalid("the effect %r belongs to a finalized context" % self.name)
        return self._p

    @property
    def token(self):
        """The Token of this effect's last dispatch on this rank (done when none)."""
        return Token(lib.shmesh_effect_token(self._ptr()))

    def __repr__(self):
        return "Effect(%r, %r)" % (self.name, self.kind)


_cb_records = {}  # key -> (fn, args, Token): a callback that has not run for sure
_cb_keys = itertools.count(1)
_callback_failures = []  # (fn, exception, device) not yet raised by effects_barrier


def _trampoline(key, device):
    # On the library's progress thread, with the GIL (ctypes takes it; the
    # thread that waits released it in its ctypes call).
    rec = _cb_records.get(key)
    if rec is None:
        return
    fn, args, tok = rec
    _in_callback.on = True  # its calls reach the library, which refuses them saying why
    try:
        fn(device, *args)
    except BaseException as e:  # noqa: B902 -- raised again from wait() and effects_barrier()
        import sys
        import traceback
        sys.stderr.write("shmesh: rank %d: callback %s raised on device %d:\n"
                         % (_rank, getattr(fn, "__qualname__", fn), device))
        traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
        sys.stderr.flush()
        if tok._exc is None:
            tok._exc = (fn, e, device)
        _callback_failures.append((fn, e, device))
    finally:
        _in_callback.on = False


_TRAMPOLINE = _lib.CALLBACK_FN(_trampoline)


def _placement(placement):
    if isinstance(placement, str):
        if placement == "all":
            return _lib.PLACE_ALL
        if placement == "self":
            return _lib.PLACE_SELF
    elif not isinstance(placement, (bool, np.bool_)):
        try:
            p = operator.index(placement)
        except TypeError:
            p = None
        if p is not None and 0 <= p < 2 ** 31:
            return p
    _invalid("callback: placement must be \"all\", \"self\" or a device id (an int >= 0), "
             "got %r" % (placement,))


def callback(fn, *args, effect=None, placement="all"):
    """Dispatches fn(device, *args) on the dispatch queue (shmesh_callback; JAX's
    io_callback / debug.callback), after every earlier work, with `effect`
    (an Effect; None: unordered) at `placement`: "all" (collective: once
    per device of the job, each rank running its own devices' parts),
    "self" (this rank alone, once per local device) or a device id
    (collective: once, on the rank holding it).  `device` is the id of the
    device whose part it is.  Returns a Token; an exception fn raises is
    printed to stderr with the rank, and raised again (as CallbackError)
    by that token's wait() and by effects_barrier().  fn runs on the
    library's progress thread: it must not call shmesh collectives (nor
    wait on tokens)."""
    if not callable(fn):
        _invalid("callback: fn must be callable, got %r" % (fn,))
    if effect is not None and not isinstance(effect, Effect):
        _invalid("callback: effect must be a shmesh.Effect or None, got %r" % (effect,))
    eff = None if effect is None else effect._ptr()
    place = _placement(placement)
    ctx = _own("callback")
    tok = Token(None, (fn, args))
    key = tok._cb = next(_cb_keys)
    _cb_records[key] = (fn, args, tok)
    rc = lib.shmesh_callback(ctx, eff, place, _TRAMPOLINE, key, ctypes.byref(tok._t))
    if rc:
        _cb_records.pop(key, None)
        _raise(rc, ctx)
    _register(tok)
    return tok


def effects_barrier():
    """Waits until everything this thread dispatched and every ordered
    effect's last work are done, on every rank for a sharded one (JAX's
    jax.effects_barrier; shmesh_effects_barrier; local).  Raises a
    CallbackError for the first callback that raised since the previous
    effects_barrier (whether or not its token was waited)."""
    ctx = _own("effects_barrier")
    rc = lib.shmesh_effects_barrier(ctx)
    if rc:
        _raise(rc, ctx)
    if _callback_failures:
        failed = _callback_failures[:]
        del _callback_failures[:len(failed)]
        raise _callback_error(*failed[0], more=len(failed) - 1)


# ---- shared memory ------------------------------------------------------------

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


_deferred_frees = []  # blocks whose last reference went on another thread


def _free(ctx, ptr):
    if _ctx is None or _ctx.value != ctx.value:
        return  # the context went, and its heap with it
    if _get_ident() != _owner:
        # The garbage collector runs on whichever thread allocates: the
        # context's thread frees it at its next alloc (the library would
        # refuse a second thread, or meet the first inside).
        _deferred_frees.append(ptr)
        return
    lib.shmesh_free(ctx, ptr)


def _free_deferred():
    while _deferred_frees:
        lib.shmesh_free(_ctx, _deferred_frees.pop())


# ---- partition specs, shardings and global arrays -----------------------------

def _checked(fn, *args):
    """fn(*args), raising on a negative result with the sentence of the
    context or of the thread (NULL), whichever the call set: sharding and
    global-array calls explain some errors in one, some in the other."""
    ctx = _ctx
    before = (lib.shmesh_last_error(ctx), lib.shmesh_last_error(None))
    rc = fn(*args)
    if rc < 0:
        after = (lib.shmesh_last_error(ctx), lib.shmesh_last_error(None))
        use_thread = after[1] != before[1] and after[0] == before[0]
        _raise(rc, None if use_thread else ctx)
    return rc


def _shape_arg(shape, what):
    try:
        shape = ((operator.index(shape),) if np.ndim(shape) == 0 else
                 tuple(_index(n, what, "a dimension") for n in shape))
    except TypeError:
        _invalid("%s: a shape is a tuple of integers, got %r" % (what, shape))
    for n in shape:
        _cint(n, what, "dimension", 64)
    if len(shape) > _lib.MAX_NDIM:
        _invalid("%s: arrays have at most %d dimensions, got %d"
                 % (what, _lib.MAX_NDIM, len(shape)))
    return shape, (ctypes.c_int64 * max(len(shape), 1))(*shape)


class PartitionSpec(tuple):
    """jax.sharding.PartitionSpec (also `P`): one entry per leading dimension
    of an array, each None (not split), a mesh axis name, or a tuple of
    names (split over the product of their sizes, the first varying
    slowest).  Dimensions past the entries are not split."""

    def __new__(cls, *entries):
        out = []
        for e in entries:
            if e is None or isinstance(e, str):
                out.append(e)
            elif isinstance(e, (tuple, list)) and all(isinstance(n, str) for n in e):
                out.append(tuple(e))
            else:
                _invalid("PartitionSpec: an entry is None, an axis name or a tuple of names, "
                         "got %r" % (e,))
        if len(out) > _lib.MAX_NDIM:
            _invalid("PartitionSpec: at most %d entries, got %d" % (_lib.MAX_NDIM, len(out)))
        return super().__new__(cls, out)

    def __repr__(self):
        # JAX's form: PartitionSpec('data', None), PartitionSpec('x',), PartitionSpec()
        return "PartitionSpec(%s)" % tuple.__repr__(self)[1:-1]

    __str__ = __repr__

    def _text(self):
        """The spec as shmesh_pspec_parse reads it: "x,(y,z),-"."""
        def entry(e):
            if e is None:
                return "-"
            if isinstance(e, str):
                return e
            return "(%s)" % ",".join(e)
        return ",".join(entry(e) for e in self)

    def _c(self):
        spec = _lib.PSpec()
        for e in self:
            for n in ([] if e is None else [e] if isinstance(e, str) else e):
                if not _name_ok(n) or any(c in n for c in "'\""):
                    _invalid("PartitionSpec: an axis name is 1 to %d characters, none of them "
                             "NUL, ',', '(', ')', a quote or whitespace; got %r"
                             % (_lib.MAX_AXIS_NAME, n))
        _checked(lib.shmesh_pspec_parse, self._text().encode(), ctypes.byref(spec))
        return spec


P = PartitionSpec


def _slices(idx, shape, shard_shape):
    """JAX's index of a block: slice(None) where the dimension is whole."""
    return tuple(slice(None) if shard_shape[d] == shape[d] else
                 slice(int(idx.start[d]), int(idx.stop[d])) for d in range(len(shape)))


class NamedSharding:
    """jax.sharding.NamedSharding: a mesh and a PartitionSpec.  Local (not
    collective); it keeps its mesh alive, and is freed with it (Mesh.close,
    finalize) or when garbage collected."""

    def __init__(self, mesh, spec):
        if not isinstance(mesh, Mesh):
            _invalid("NamedSharding: mesh must be a shmesh.Mesh, got %r" % (mesh,))
        if not mesh._p:
            _invalid("NamedSharding: the mesh was destroyed (shmesh.finalize or Mesh.close)")
        if not isinstance(spec, PartitionSpec):
            if spec is None or isinstance(spec, str):
                spec = PartitionSpec(spec)
            else:
                spec = PartitionSpec(*spec)
        self.mesh = mesh
        self.spec = spec
        self._cspec = spec._c()
        p = ctypes.c_void_p()
        _checked(lib.shmesh_sharding_create, mesh._p, ctypes.byref(self._cspec), ctypes.byref(p))
        self._p = p
        self._arrays = weakref.WeakSet()
        mesh._shardings.add(self)

    def __repr__(self):
        return "NamedSharding(mesh=%r, spec=%r)" % (self.mesh, self.spec)

    def _ptr(self):
        if not self._p:
            _invalid("the sharding was destroyed (its mesh was closed, or shmesh.finalize)")
        return self._p

    def shard_shape(self, global_shape):
        """The shape of every shard of an array of global_shape."""
        shape, cshape = _shape_arg(global_shape, "shard_shape")
        out = (ctypes.c_int64 * max(len(shape), 1))()
        _checked(lib.shmesh_sharding_shard_shape, self._ptr(), len(shape), cshape, out)
        return tuple(int(out[d]) for d in range(len(shape)))

    def is_fully_replicated_for(self, global_shape):
        """Whether every shard of an array of global_shape is the whole array."""
        shape, cshape = _shape_arg(global_shape, "is_fully_replicated")
        return bool(_checked(lib.shmesh_sharding_is_fully_replicated, self._ptr(), len(shape),
                             cshape))

    @property
    def is_fully_replicated(self):
        """Whether the spec splits nothing (every axis it names has size 1),
        as JAX's property: each device holds the whole array."""
        sizes = self.mesh.shape
        for e in self.spec:
            for n in ([] if e is None else [e] if isinstance(e, str) else e):
                if sizes.get(n, 1) != 1:
                    return False
        return True

    def _indices(self, shape, cshape):
        n = lib.shmesh_mesh_size(self.mesh._p)
        out = (_lib.Index * max(n, 1))()
        _checked(lib.shmesh_sharding_indices, self._ptr(), len(shape), cshape, out)
        return out, n

    def devices_indices_map(self, global_shape):
        """{device id: its block as a tuple of slices}, in mesh order, as
        JAX's (keyed by device ids, not Device objects)."""
        shape, cshape = _shape_arg(global_shape, "devices_indices_map")
        sshape = self.shard_shape(shape)
        out, n = self._indices(shape, cshape)
        return {int(out[i].device): _slices(out[i], shape, sshape) for i in range(n)}

    def replica_ids(self, global_shape):
        """{device id: replica id} (0 for the first holder of a block in mesh
        order)."""
        shape, cshape = _shape_arg(global_shape, "replica_ids")
        out, n = self._indices(shape, cshape)
        return {int(out[i].device): int(out[i].replica_id) for i in range(n)}

    def _destroy(self):
        if self._p:
            for a in list(self._arrays):
                a._destroy()
            lib.shmesh_sharding_destroy(self._p)
            self._p = None

    def __del__(self):
        if _ctx is not None and getattr(self, "_p", None):
            self._destroy()


class Shard:
    """One shard of a GlobalArray (jax.Shard): `device` (its id), `index`
    (its block, a tuple of slices), `replica_id`, and `data`, a read-only
    numpy view of the array's own buffer (no copy: valid while the array
    lives, not after its mesh is closed or finalize()), or None for another
    rank's device (global_shards)."""

    __slots__ = ("device", "index", "replica_id", "data")

    def __init__(self, device, index, replica_id, data):
        self.device, self.index, self.replica_id, self.data = device, index, replica_id, data

    def __repr__(self):
        return "Shard(device=%d, index=%r, replica_id=%d, data=%r)" % (
            self.device, self.index, self.replica_id, self.data)


class GlobalArray:
    """A global array (jax.Array): one logical array of `shape` and `dtype`
    split over the devices of `sharding.mesh`; this rank holds the shards of
    its own devices (`addressable_shards`).  Made by
    make_array_from_callback or device_put; ``np.asarray(a)`` (or
    a.gather()) gathers the whole array to every rank, which is collective."""

    def __init__(self, p, sharding, dtype):
        self._p = p
        self.sharding = sharding
        self.dtype = np.dtype(dtype)
        cshape = (ctypes.c_int64 * _lib.MAX_NDIM)()
        nd = lib.shmesh_global_array_shape(p, cshape)
        self.shape = tuple(int(cshape[d]) for d in range(nd))
        self._views = []  # weak references to the shards' buffers numpy arrays hold
        sharding._arrays.add(self)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def is_fully_replicated(self):
        return bool(lib.shmesh_global_array_is_fully_replicated(self._ptr()))

    def _ptr(self):
        if not self._p:
            _invalid("the global array was destroyed (close, its mesh closed, or "
                     "shmesh.finalize)")
        return self._p

    @property
    def addressable_shards(self):
        """This rank's shards, one per local device of the mesh, in mesh order
        (made anew at each access: the array is not in a cycle with them)."""
        return self._shards(lib.shmesh_global_array_local_shards)

    @property
    def global_shards(self):
        """Every device's shard, in mesh order (jax.Array.global_shards):
        `data` is this rank's view for its own devices and None for the
        others' (their memory is not this process's)."""
        return self._shards(lib.shmesh_global_array_global_shards)

    def _shards(self, fn):
        ptr = ctypes.POINTER(_lib.Shard)()
        n = _checked(fn, self._ptr(), ctypes.byref(ptr))
        sshape = self.sharding.shard_shape(self.shape)
        local = set(_local_devices_of(self.sharding.mesh._p))
        count = int(np.prod(sshape, dtype=np.int64))
        shards = []
        for i in range(n):
            sh = ptr[i]
            dev = int(sh.index.device)
            if dev not in local:
                data = None
            elif sh.data.data and count:
                buf = (ctypes.c_char * (count * self.dtype.itemsize)).from_address(
                    sh.data.data)
                buf._owner = self  # the view keeps the array alive
                # and a donation waits for it (device_put)
                self._views = [r for r in self._views if r() is not None]
                self._views.append(weakref.ref(buf))
                data = np.frombuffer(buf, dtype=self.dtype).reshape(sshape)
                data.flags.writeable = False
            else:
                data = np.zeros(sshape, self.dtype)
                data.flags.writeable = False
            shards.append(Shard(dev, _slices(sh.index, self.shape, sshape),
                                int(sh.index.replica_id), data))
        return shards

    def gather(self, root=-1):
        """Collective: the whole array (a new numpy array) on every rank
        (root -1), or on rank `root` only (None elsewhere);
        shmesh_global_array_gather."""
        root = _cint(root, "gather", "root")
        _own("gather")
        ptr = self._ptr()
        want = root == -1 or root == rank()
        out = np.empty(self.shape, self.dtype) if want else None
        _checked(lib.shmesh_global_array_gather, ptr, root,
                 out.ctypes.data if want and out.size else None)
        return out

    def __array__(self, dtype=None, copy=None):
        out = self.gather(-1)
        return out if dtype is None else out.astype(dtype, copy=False)

    def __repr__(self):
        return "GlobalArray(shape=%r, dtype=%s, sharding=%r)" % (self.shape, self.dtype,
                                                                  self.sharding)

    def _destroy(self):
        if self._p:
            lib.shmesh_global_array_destroy(self._p)
            self._p = None

    def close(self):
        """Frees the array's shards now (else when it and its shards' data
        are garbage collected, its mesh is closed, or at finalize())."""
        self._destroy()

    def __del__(self):
        if _ctx is not None and getattr(self, "_p", None):
            self._destroy()


def _local_devices_of(mp):
    """This rank's device ids in the mesh mp (a pointer), in mesh order."""
    n = lib.shmesh_mesh_size(mp)
    ids = (ctypes.c_int * max(n, 1))()
    k = _checked(lib.shmesh_mesh_local_devices, mp, ids, n)
    return [ids[i] for i in range(k)]


def make_array_from_callback(shape, sharding, data_callback, dtype=None):
    """jax.make_array_from_callback: a GlobalArray of `shape` whose shard on
    each local device is data_callback(index), index that device's block as
    a tuple of slices (so a global numpy array g gives it as g[index]).
    Local (not collective): every rank should make the same arrays.  With
    dtype None, the dtype is that of the first block the callback returns."""
    what = "make_array_from_callback"
    if not isinstance(sharding, NamedSharding):
        _invalid("%s: sharding must be a shmesh.NamedSharding, got %r" % (what, sharding))
    shape, cshape = _shape_arg(shape, what)
    _own(what)
    sp = sharding._ptr()
    first = {}
    if dtype is None:
        imap = sharding.devices_indices_map(shape)  # the refusals of a bad shape, first
        local = _local_devices_of(sharding.mesh._p)
        if not local:
            _invalid("%s: dtype=None takes the dtype of the callback's first block, but this "
                     "rank holds no device of the mesh: pass dtype" % what)
        block = np.asarray(data_callback(imap[local[0]]))
        dtype = block.dtype
        first[local[0]] = block
    code = _code(dtype, what)
    dtype = np.dtype(dtype)
    failure = []

    def fill(arg, shard_p):
        try:
            sh = shard_p.contents
            index = _slices(sh.index, shape, tuple(int(sh.data.shape[d])
                                                   for d in range(len(shape))))
            sshape = tuple(int(sh.data.shape[d]) for d in range(len(shape)))
            dev = int(sh.index.device)
            block = first.pop(dev) if dev in first else np.asarray(data_callback(index))
            if block.shape != sshape:
                raise InvalidArgument(
                    "%s: the callback returned shape %s for device %d's block %r, whose shape "
                    "is %s" % (what, block.shape, dev, index, sshape), -1)
            count = int(np.prod(sshape, dtype=np.int64))
            if count and sh.data.data:
                buf = (ctypes.c_char * (count * dtype.itemsize)).from_address(sh.data.data)
                np.frombuffer(buf, dtype=dtype).reshape(sshape)[...] = block
            return 0
        except BaseException as e:  # noqa: B902 -- carried out of C, raised below
            failure.append(e)
            return 1

    cb = _lib.SHARD_FN(fill)
    p = ctypes.c_void_p()
    try:
        _checked(lib.shmesh_global_array_from_callback, sp, code, len(shape), cshape, cb, None,
                 ctypes.byref(p))
    except Error:
        if failure:
            raise failure[0]
        raise
    return GlobalArray(p, sharding, dtype)


def make_array_from_single_device_arrays(shape, sharding, arrays, *, dtype=None):
    """jax.make_array_from_single_device_arrays: a GlobalArray of `shape`
    over `arrays`, one numpy array per device this rank holds in the
    sharding's mesh (in mesh.local_devices order), each that device's
    shard (of sharding.shard_shape(shape)).  Borrowed, not copied
    (shmesh_global_array_create): a C-contiguous array of native byte
    order is used in place, and the GlobalArray keeps it alive; writing
    into it changes that shard.  Any other array is copied first.  Local
    (not collective).  dtype: the arrays' (needed when this rank holds no
    device of the mesh)."""
    what = "make_array_from_single_device_arrays"
    if not isinstance(sharding, NamedSharding):
        _invalid("%s: sharding must be a shmesh.NamedSharding, got %r" % (what, sharding))
    shape, cshape = _shape_arg(shape, what)
    _own(what)
    sp = sharding._ptr()
    sshape = sharding.shard_shape(shape)  # the sharding's refusals of a bad shape, first
    local = _local_devices_of(sharding.mesh._p)
    bufs = [_prepare(a, what) for a in arrays]
    if len(bufs) != len(local):
        _invalid("%s: %d arrays given; this rank holds %d devices of the mesh (%s), one array "
                 "each" % (what, len(bufs), len(local), ", ".join(map(str, local))))
    if dtype is None:
        if not bufs:
            _invalid("%s: no arrays to take the dtype from (this rank holds no device of the "
                     "mesh): pass dtype" % what)
        dtype = bufs[0].dtype
    code = _code(dtype, what)
    dtype = np.dtype(dtype)
    for dev, b in zip(local, bufs):
        if b.dtype != dtype or b.shape != sshape:
            _invalid("%s: device %d's array is %s%s; its shard of %s is %s%s"
                     % (what, dev, b.dtype, list(b.shape), list(shape), dtype, list(sshape)))
    ptrs = (ctypes.c_void_p * max(len(bufs), 1))(*[_ptr(b) for b in bufs])
    p = ctypes.c_void_p()
    _checked(lib.shmesh_global_array_create, sp, code, len(shape), cshape, ptrs,
             ctypes.byref(p))
    a = GlobalArray(p, sharding, dtype)
    a._borrowed = bufs  # the library reads them for as long as the array lives
    return a


def device_put(x, sharding, *, root=0, donate=False):
    """jax.device_put onto a NamedSharding, collective: a GlobalArray x
    resharded (shmesh_global_array_reshard), or a host array whose data is
    rank root's (read there only; shmesh_global_array_scatter).  donate=True
    (a GlobalArray): x is used up (shmesh_global_array_reshard_donate), and
    the pages of a shard that lies whole in a new one may move there
    instead of being copied; refused while numpy arrays still view x's
    shards."""
    if not isinstance(sharding, NamedSharding):
        _invalid("device_put: sharding must be a shmesh.NamedSharding, got %r" % (sharding,))
    _own("device_put")
    p = ctypes.c_void_p()
    if isinstance(x, GlobalArray) and donate:
        x._ptr()
        live = sum(r() is not None for r in x._views)
        if live:
            _invalid("device_put(donate=True): %d buffer(s) of the array's shards are still "
                     "viewed by numpy arrays (addressable_shards' data, or views of it); "
                     "expected none: drop them first, or pass donate=False" % live)
        _checked(lib.shmesh_global_array_reshard_donate, x._p, sharding._ptr(),
                 ctypes.byref(p))
        x._p = None  # the library destroyed it
        x.sharding._arrays.discard(x)
        return GlobalArray(p, sharding, x.dtype)
    if isinstance(x, GlobalArray):
        _checked(lib.shmesh_global_array_reshard, x._ptr(), sharding._ptr(), ctypes.byref(p))
        return GlobalArray(p, sharding, x.dtype)
    a = _prepare(x, "device_put")
    shape, cshape = _shape_arg(a.shape, "device_put")
    _checked(lib.shmesh_global_array_scatter, sharding._ptr(), _CODES[a.dtype], len(shape),
             cshape, _cint(root, "device_put", "root"), a.ctypes.data if a.size else None,
             ctypes.byref(p))
    return GlobalArray(p, sharding, a.dtype)
