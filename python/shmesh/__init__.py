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

# The package is split into private modules, each layer importing only
# those below it:
#
#   _lib          libshmesh through ctypes (its structs, prototypes, op table) and the
#                 compiled module (_ext), loaded and bound
#   _errors       Error and its subclasses, one per error code
#   _context      the context and the state the package rebinds (_ctx, ...), published
#                 to _ext (_publish)
#   _arrays       dtypes, argument checks, axis names, groups, pytrees
#   _mesh         Mesh, axis_index, axis_size
#   _futures      async dispatch: Token, Pending, wait_all, wait_any
#   _interop      torch and DLPack arrays, device memory (DeviceArray)
#   _collectives  psum ... and their _async forms, each call made by _ext
#   _effects      Effect, callback, effects_barrier
#   _memory       alloc (the shared heap)
#   _sharding     PartitionSpec, NamedSharding, GlobalArray, device_put
#
# and beside them _ext (_ext.c, the compiled module of every call) and run
# (python3 -m shmesh.run, the launcher's front for this interpreter).
# This module names what they offer.  The state the package rebinds at run
# time is not named here (a name imported here would keep the binding of
# import time): read it from its module, shmesh._context._local_devices.
from . import _arrays, _collectives, _interop, _lib
from ._errors import (Error, InvalidArgument, PeerDead, Aborted, Timeout, Mismatch, OutOfMemory,
                      SystemFailure, BadSegment, CallbackError)
from ._context import (init, finalize, initialized, rank, world_size, device_count, notifier,
                       abort, barrier, hand_over)
from ._mesh import Mesh, axis_index, axis_size
from ._futures import barrier_async, Pending, Token, wait_all, wait_any, runtime_token
from ._interop import DeviceArray, device_array
from ._collectives import ops
from ._effects import Effect, callback, effects_barrier
from ._memory import alloc
from ._sharding import (PartitionSpec, P, NamedSharding, GlobalArray, Shard,
                        make_array_from_callback, make_array_from_single_device_arrays,
                        device_put)

# The collectives, from the library's op table: every mesh op (psum,
# all_gather, ...) and its _async form, each written in _collectives.
for _name in _collectives._MESH_OPS + _collectives._ASYNC_FORMS:
    globals()[_name] = getattr(_collectives, _name)

# Names outside __all__ that programs, tests and benchmarks use.
lib, OPS, Op = _lib.lib, _lib.OPS, _lib.Op
BUCKET_BYTES = _collectives.BUCKET_BYTES  # the default bucket_bytes of psum, pmean, ...
_ext = _collectives._ext
_WORLD_OPS = _collectives._WORLD_OPS
_CODES, _prepare = _arrays._CODES, _arrays._prepare
_from_foreign = _interop._from_foreign

__all__ = [
    "init", "finalize", "initialized", "rank", "world_size", "device_count", "notifier",
    "abort", "barrier", "Mesh", "axis_index", "axis_size", "alloc", "Error", "InvalidArgument",
    "PeerDead", "Aborted", "Timeout", "Mismatch", "OutOfMemory", "SystemFailure",
    "BadSegment", "PartitionSpec", "P", "NamedSharding", "GlobalArray", "Shard",
    "make_array_from_callback", "make_array_from_single_device_arrays", "device_put",
    "device_array", "DeviceArray",
    "barrier_async", "Pending", "Token", "wait_all", "wait_any", "runtime_token", "Effect",
    "callback", "effects_barrier", "CallbackError", "hand_over", "ops",
]  # and the collectives, from the library's op table (_collectives._MESH_OPS)
__all__ += list(_collectives._MESH_OPS) + list(_collectives._ASYNC_FORMS)

# The public names are shmesh's, as before the split: shmesh.Mesh, not
# shmesh._mesh.Mesh, in reprs, tracebacks and pickles (an exception's
# class is found again by its module and name).
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(__name__ + "._"):
        _obj.__module__ = __name__
del _name, _obj
