"""The context (shmesh_ctx) and the state of this process's binding:
joining and leaving the job, the thread the context belongs to, a fork
child's refusals, the exit handler, and the raising helpers that word a
refusal with this rank.  Above _errors, below everything else.

The state the package rebinds at run time (_ctx, _gen, _rank,
_local_devices, _MAX_NDIM, _owner, _owner_thread, _fork_parent, _lock,
_registry_lock ...) lives here and only here: the other modules read it as
an attribute of this module (_context._ctx), never by importing the name,
which would copy the binding of the moment (None before init()).  The
compiled path (_ext.c) reads _ctx, _owner and _local_devices from this
module's dict at each call."""
import atexit
import collections
import ctypes
import os
import sys
import threading
import weakref

from . import _lib
from ._lib import lib
from ._errors import Error, InvalidArgument, _last_error, _raise

_ctx = None       # ctypes.c_void_p of shmesh_ctx, once init() has run
_gen = 0          # finalize() count: tokens and effects of an earlier context are stale
_rank = -1        # this rank, for callbacks' messages (which must not call the library)
_local_devices = 1  # K: arrays of collectives carry a leading axis of K (_shape_of)
_MAX_NDIM = _lib.MAX_NDIM  # the most dimensions an argument may have: one more with K > 1
_meshes = weakref.WeakSet()  # the Meshes made (_mesh): finalize() destroys them
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


def _publish():
    """Tells the compiled module what its fast path checks at each call: a
    live context, its owner thread, the devices per rank.  Called wherever
    _ctx, _owner or _local_devices change (init, finalize, a fork child,
    the owner's changes)."""
    _lib.ext.state(_ctx is not None, _owner if _owner is not None else 0, _local_devices)


# (rank, pid) of the parent in a fork child of a process that held a
# context: the context is the parent's (its segment, its call numbers, its
# progress thread, which the child does not have), so every call is
# refused and the child's exit leaves the job alone.
_fork_parent = None

# Work in flight that finalize() waits for and a fork child disowns, kept
# here with the context it belongs to: _futures and _effects fill them.
_registry = collections.deque()  # Tokens of work not yet seen done, oldest first (_futures)
_registry_lock = threading.Lock()
_cb_records = {}  # key -> (fn, args, Token): a callback that has not run for sure (_effects)
_deferred_frees = []  # heap blocks whose last reference went on another thread (_memory)


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
    _publish()


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
        _publish()
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
        if _owner != _get_ident():
            _owner, _owner_thread = _get_ident(), me
            _publish()
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
    _publish()


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


def _release(tok):
    """Lets go of what tok's work held (its arrays, its callback's record):
    the work is done, or its context went."""
    tok._keep = None
    if tok._cb:
        _cb_records.pop(tok._cb, None)


def _drain():
    """finalize(): waits for every pending dispatch, keeping each failure
    for its token (the context goes: tokens cannot ask it later)."""
    with _registry_lock:
        pending = list(_registry)
        _registry.clear()
    for tok in pending:
        if tok._live():
            rc = _lib.ext.token_wait(tok._a)
            if rc:
                tok._failed = (rc, _last_error(tok._t.ctx) or
                               (lib.shmesh_strerror(rc) or b"").decode())
        _release(tok)


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
        _publish()
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
