"""The package's exceptions: shmesh.Error and one subclass per error code
of the library, and the function that raises the one a code names.  The
bottom layer: it knows the library (_lib) and nothing of the context."""
from ._lib import lib


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


class CallbackError(Error):
    """A function run by shmesh.callback raised: `exception` is what it
    raised (also the __cause__), `device` the device whose part it was."""

    def __init__(self, message, exception=None, device=None):
        super().__init__(message)
        self.exception = exception
        self.device = device


def _raise(rc, ctx=None):
    text = lib.shmesh_last_error(ctx)
    text = text.decode(errors="replace") if text else ""
    if not text:
        text = (lib.shmesh_strerror(rc) or b"error %d" % rc).decode(errors="replace")
    raise _ERRORS.get(rc, Error)(text, rc)


def _last_error(ctx):
    text = lib.shmesh_last_error(ctx)
    return text.decode(errors="replace") if text else ""
