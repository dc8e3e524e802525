"""Effects and callbacks: Effect (shmesh_effect_create), callback (a
Python function run on the library's progress thread, in dispatch order)
and effects_barrier.  Above _futures: a callback is dispatched work with a
Token."""
import ctypes
import itertools
import operator

import numpy as np

from . import _context, _lib
from ._lib import lib
from ._errors import InvalidArgument, _raise
from ._context import _fork_sentence, _invalid, _own
from ._futures import Token, _callback_error, _register

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
        self._gen = _context._gen
        self.name = name
        self.kind = kind

    def _ptr(self):
        if _context._fork_parent is not None:
            raise InvalidArgument(_fork_sentence("Effect %r" % self.name), -1)
        if self._gen != _context._gen or _context._ctx is None:
            _invalid("the effect %r belongs to a finalized context" % self.name)
        return self._p

    @property
    def token(self):
        """The Token of this effect's last dispatch on this rank (done when none)."""
        return Token(lib.shmesh_effect_token(self._ptr()))

    def __repr__(self):
        return "Effect(%r, %r)" % (self.name, self.kind)


_cb_keys = itertools.count(1)
_callback_failures = []  # (fn, exception, device) not yet raised by effects_barrier


def _trampoline(key, device):
    # On the library's progress thread, with the GIL (ctypes takes it; the
    # thread that waits released it in its ctypes call).
    rec = _context._cb_records.get(key)
    if rec is None:
        return
    fn, args, tok = rec
    _context._in_callback.on = True  # its calls reach the library, which refuses them saying why
    try:
        fn(device, *args)
    except BaseException as e:  # noqa: B902 -- raised again from wait() and effects_barrier()
        import sys
        import traceback
        sys.stderr.write("shmesh: rank %d: callback %s raised on device %d:\n"
                         % (_context._rank, getattr(fn, "__qualname__", fn), device))
        traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
        sys.stderr.flush()
        if tok._exc is None:
            tok._exc = (fn, e, device)
        _callback_failures.append((fn, e, device))
    finally:
        _context._in_callback.on = False


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
    _context._cb_records[key] = (fn, args, tok)
    rc = lib.shmesh_callback(ctx, eff, place, _TRAMPOLINE, key, ctypes.byref(tok._t))
    if rc:
        _context._cb_records.pop(key, None)
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
