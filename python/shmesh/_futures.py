"""Async dispatch and tokens: the _async forms' dispatch (_dispatch),
Token (JAX's RuntimeToken), Pending, barrier_async, wait_all, wait_any and
runtime_token.  Above _context; the collectives and callbacks dispatch
through it."""
import ctypes

from . import _context, _lib
from ._lib import lib
from ._errors import CallbackError, Error, _ERRORS, _last_error, _raise
from ._context import _c, _invalid, _own, _raise_on, _release

# The library owns an async call's buffers until its token is done, so
# Python must not free them before, even when the caller drops the Pending:
# each dispatch's Token holds what the call uses (input, output, groups,
# parameters; a callback's function and arguments) and stays in
# _context._registry until it is seen done (_register tests the oldest at
# each dispatch: work finishes in dispatch order) or finalize() waited for
# it (_context._drain).  The descriptors themselves (shmesh_array,
# perm arrays) are copied by the library at dispatch (flow_init in
# lib/engine/flow.c, the call's scratch in lib/ops/permute.c, struct ragged
# in lib/ops/ragged.c), so those _ext.call builds on its stack may go when
# it returns; the groups' struct is the Token's to keep.

_raw = _lib.raw
_ext = _lib.ext


def _callback_error(fn, exc, device, more=0):
    name = getattr(fn, "__qualname__", None) or repr(fn)
    err = CallbackError("callback %s raised on rank %d (device %d): %s: %s%s"
                        % (name, _context._rank, device, type(exc).__name__, exc,
                           " (and %d more callbacks failed)" % more if more else ""),
                        exc, device)
    err.__cause__ = exc
    return err


class Token:
    """A position in this process's dispatch queue (shmesh_token, JAX's
    RuntimeToken): done once that work and everything dispatched before it
    finished.  A value: copy it, wait on it twice, drop it."""

    __slots__ = ("_t", "_a", "_gen", "_keep", "_cb", "_failed", "_exc")

    def __init__(self, t=None, keep=None):
        self._t = _lib.Token() if t is None else t
        self._a = ctypes.addressof(self._t)  # where the compiled module writes and reads it
        self._gen = _context._gen
        self._keep = keep      # what the library uses until done (_registry)
        self._cb = 0           # its callback's key in _cb_records (0: none)
        self._failed = None    # (code, sentence), once seen failed by _register or _drain
        self._exc = None       # (fn, exception, device): the callback raised

    def _live(self):
        """Whether the library still knows the token (not done with no work,
        nor of a finalized context)."""
        return self._t.ctx is not None and self._gen == _context._gen

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
            rc = _ext.token_wait(self._a)
            if rc:
                _raise(rc, self._t.ctx)
        self._check()

    def is_ready(self):
        """Never blocks: True once done, False before; raises as wait()."""
        if self._live():
            rc = _ext.token_test(self._a)
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
            rc = _ext.token_test(self._a)
            state = ("pending" if rc == 0 else "done" if rc > 0 and not self._exc else
                     "failed: %s" % (_ERRORS.get(rc, Error).__name__ if rc < 0 else
                                     "callback raised"))
        return "Token(seq=%d, %s)" % (self._t.seq, state)


def _register(tok):
    """Keeps tok's work alive in _context._registry; releases what done work held."""
    with _context._registry_lock:
        _context._registry.append(tok)
        while _context._registry:
            old = _context._registry[0]
            rc = _ext.token_test(old._a) if old._live() else 1
            if rc == 0:
                break  # the oldest is not done: neither are the later ones (dispatch order)
            if rc < 0:
                old._failed = (rc, _last_error(old._t.ctx) or
                               (lib.shmesh_strerror(rc) or b"").decode())
            _release(old)
            _context._registry.popleft()


def _dispatch(w, start, keep, mp):
    """start(the address of a new token's shmesh_token) dispatches an _async
    call and returns the library's code (an int), the call's result, or
    (shape, code) or None where nothing was dispatched (_collectives._leaf's);
    the token, which keeps `keep` and that result alive until done, is
    appended to w.  A refusal (nothing dispatched) raises, explained on mesh pointer
    mp (_raise_on).  Returns what start did."""
    tok = Token(None, None)
    r = start(tok._a)
    if r is None or type(r) is tuple:  # nothing dispatched: _leaf's to mend and redo
        return r
    if type(r) is int and r:
        _raise_on(r, mp)
    tok._keep = (keep, r)
    _register(tok)
    w.append(tok)
    return r


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


def _dispatched(tok, a, out):
    """The Pending of one array's call that the compiled module dispatched
    with the new Token tok: it keeps the input and the result alive until
    done (_register)."""
    tok._keep = (a, out)
    _register(tok)
    return Pending(out, [tok])


def _pending(body, *args):
    """body(*args, w) with a list w: the Pending of the tokens it dispatched."""
    w = []
    return Pending(body(*args, w), w)


def barrier_async():
    """barrier's async form: a Pending whose result is None."""
    w = []
    ctx = _own("barrier_async")
    _dispatch(w, lambda t: _raw.shmesh_barrier_async(ctx, ctypes.c_void_p(t)), None, None)
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
        rc = _ext.wait_tokens([t._a for t in live], False)
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
    rc, index = _ext.wait_tokens([t._a for t in toks], True)
    if rc:
        _raise(rc, toks[0]._t.ctx)
    toks[index]._check()
    return index


def runtime_token():
    """The Token of everything this thread dispatched so far (JAX's
    RuntimeToken; shmesh_runtime_token): done when it dispatched nothing."""
    return Token(lib.shmesh_runtime_token(_c()))
