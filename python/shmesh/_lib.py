"""libshmesh through ctypes: finding the library, its structs and prototypes.

The library is looked for, in order: the file SHMESH_LIBRARY names; a
libshmesh.so.0 next to this package (a copy placed there); the build tree
this package sits in (python/ beside build*/lib/); the system's search path
(LD_LIBRARY_PATH, the installed library).

The compiled module (shmesh._ext, shmesh/_ext.c), which makes every
collective call and waits on tokens, is looked for installed beside the
package, then in the build tree the library came from (build/python/);
without it the package does not import (load_ext says what to install).
It is loaded and bound to the library's functions here (ext)."""
import ctypes
import glob
import importlib.machinery
import importlib.util
import os
import sys

MAX_NDIM = 8  # SHMESH_MAX_NDIM
NOT_MAPPED = -(2 ** 31)  # SHMESH_NOT_MAPPED


class Array(ctypes.Structure):
    """shmesh_array."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int64 * MAX_NDIM),
        ("bdim", ctypes.c_int),
    ]


class Groups(ctypes.Structure):
    """shmesh_groups."""
    _fields_ = [
        ("ngroups", ctypes.c_int),
        ("group_size", ctypes.c_int),
        ("indices", ctypes.POINTER(ctypes.c_int)),
        ("group_sizes", ctypes.POINTER(ctypes.c_int)),
    ]


MAX_MESH_DIMS = 8  # SHMESH_MAX_MESH_DIMS
MAX_AXIS_NAME = 31  # SHMESH_MAX_AXIS_NAME


class PSpec(ctypes.Structure):
    """shmesh_pspec."""
    _fields_ = [
        ("n", ctypes.c_int),
        ("naxes", ctypes.c_int * MAX_NDIM),
        ("axes", ((ctypes.c_char * (MAX_AXIS_NAME + 1)) * MAX_MESH_DIMS) * MAX_NDIM),
    ]


class Index(ctypes.Structure):
    """shmesh_index."""
    _fields_ = [
        ("device", ctypes.c_int),
        ("replica_id", ctypes.c_int),
        ("start", ctypes.c_int64 * MAX_NDIM),
        ("stop", ctypes.c_int64 * MAX_NDIM),
    ]


class Shard(ctypes.Structure):
    """shmesh_shard."""
    _fields_ = [("index", Index), ("data", Array)]


# shmesh_shard_fn: int (*)(void *arg, const shmesh_shard *shard)
SHARD_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(Shard))


class Token(ctypes.Structure):
    """shmesh_token: a position in a context's dispatch queue (ctx NULL: done)."""
    _fields_ = [("ctx", ctypes.c_void_p), ("seq", ctypes.c_uint64)]


class OpInfo(ctypes.Structure):
    """shmesh_op_info (read only through the library's pointer: the library may
    add fields at its end)."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("code", ctypes.c_int),
        ("scope", ctypes.c_int),
        ("sig", ctypes.c_int),
        ("has_async", ctypes.c_bool),
        ("bool_input", ctypes.c_bool),
        ("bus", ctypes.c_int),
        ("params", ctypes.c_char_p),
    ]


# shmesh_callback_fn: void (*)(void *arg, int device)
CALLBACK_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int)
PLACE_ALL = -1  # SHMESH_PLACE_ALL
PLACE_SELF = -2  # SHMESH_PLACE_SELF
MAX_EFFECT_NAME = 31  # SHMESH_MAX_EFFECT_NAME


def _candidates():
    given = os.environ.get("SHMESH_LIBRARY")
    if given:
        return [given], True
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.join(here, "libshmesh.so.0")]
    root = os.path.dirname(os.path.dirname(here))
    # build/ first (then build-*/ in name order: "build-sanitize" sorts
    # before "build/", and a sanitized library does not load in a plain
    # interpreter).
    paths += sorted(glob.glob(os.path.join(root, "build*", "lib", "libshmesh.so.0")),
                    key=lambda p: (os.path.basename(os.path.dirname(os.path.dirname(p))) != "build",
                                   p))
    paths.append("libshmesh.so.0")
    return paths, False


# The file the library was loaded from (None: found on the library path).
lib_path = None


def _load():
    global lib_path
    paths, given = _candidates()
    errors = []
    for p in paths:
        if p != "libshmesh.so.0" and not os.path.exists(p):
            if given:
                errors.append("%s: no such file" % p)
            continue
        try:
            loaded = ctypes.CDLL(p)
            lib_path = os.path.abspath(p) if p != "libshmesh.so.0" else None
            return loaded
        except OSError as e:
            errors.append(str(e))
    raise ImportError(
        "shmesh: cannot load libshmesh (%s); build it (./run.sh --build-only) and set "
        "SHMESH_LIBRARY to build/lib/libshmesh.so.0, or install it"
        % "; ".join(errors or ["not found next to the package, in a build tree or on the "
                               "library path"]))


lib = _load()

P = ctypes.c_void_p
I = ctypes.c_int
S = ctypes.c_char_p

_PROTOS = {
    "shmesh_init": (I, [ctypes.POINTER(P)]),
    "shmesh_finalize": (I, [P]),
    "shmesh_finalize_at_exit": (I, [P, S]),
    "shmesh_abort": (None, [P, I, S]),
    "shmesh_rank": (I, [P]),
    "shmesh_world_size": (I, [P]),
    "shmesh_barrier": (I, [P]),
    "shmesh_notifier": (S, [P]),
    "shmesh_alloc": (P, [P, ctypes.c_size_t]),
    "shmesh_free": (None, [P, P]),
    "shmesh_device_count": (I, [P]),
    "shmesh_local_device_count": (I, [P]),
    "shmesh_device_alloc": (I, [P, I, ctypes.c_size_t, ctypes.POINTER(P)]),
    "shmesh_device_free": (I, [P, P]),
    "shmesh_device_copy": (I, [P, P, P, ctypes.c_size_t]),
    "shmesh_mesh_create": (I, [P, I, ctypes.POINTER(S), ctypes.POINTER(I), ctypes.POINTER(I),
                               ctypes.POINTER(P)]),
    "shmesh_mesh_destroy": (None, [P]),
    "shmesh_mesh_push": (I, [P]),
    "shmesh_mesh_pop": (I, [P]),
    "shmesh_mesh_current": (P, []),
    "shmesh_mesh_text": (I, [P, ctypes.c_char_p, ctypes.c_size_t]),
    "shmesh_axis_index": (I, [P, S, ctypes.POINTER(I)]),
    "shmesh_axis_size": (I, [P, S, ctypes.POINTER(I)]),
    "shmesh_axis_index_of": (I, [P, S, I, ctypes.POINTER(I)]),
    "shmesh_mesh_size": (I, [P]),
    "shmesh_mesh_local_devices": (I, [P, ctypes.POINTER(I), I]),
    "shmesh_pspec_parse": (I, [S, ctypes.POINTER(PSpec)]),
    "shmesh_pspec_text": (I, [ctypes.POINTER(PSpec), ctypes.c_char_p, ctypes.c_size_t]),
    "shmesh_sharding_create": (I, [P, ctypes.POINTER(PSpec), ctypes.POINTER(P)]),
    "shmesh_sharding_destroy": (None, [P]),
    "shmesh_sharding_shard_shape": (I, [P, I, ctypes.POINTER(ctypes.c_int64),
                                        ctypes.POINTER(ctypes.c_int64)]),
    "shmesh_sharding_is_fully_replicated": (I, [P, I, ctypes.POINTER(ctypes.c_int64)]),
    "shmesh_sharding_indices": (I, [P, I, ctypes.POINTER(ctypes.c_int64),
                                    ctypes.POINTER(Index)]),
    "shmesh_global_array_from_callback": (I, [P, I, I, ctypes.POINTER(ctypes.c_int64), SHARD_FN,
                                              P, ctypes.POINTER(P)]),
    "shmesh_global_array_create": (I, [P, I, I, ctypes.POINTER(ctypes.c_int64),
                                       ctypes.POINTER(P), ctypes.POINTER(P)]),
    "shmesh_global_array_scatter": (I, [P, I, I, ctypes.POINTER(ctypes.c_int64), I, P,
                                        ctypes.POINTER(P)]),
    "shmesh_global_array_reshard": (I, [P, P, ctypes.POINTER(P)]),
    "shmesh_global_array_reshard_donate": (I, [P, P, ctypes.POINTER(P)]),
    "shmesh_global_array_destroy": (None, [P]),
    "shmesh_global_array_shape": (I, [P, ctypes.POINTER(ctypes.c_int64)]),
    "shmesh_global_array_is_fully_replicated": (ctypes.c_bool, [P]),
    "shmesh_global_array_local_shards": (I, [P, ctypes.POINTER(ctypes.POINTER(Shard))]),
    "shmesh_global_array_global_shards": (I, [P, ctypes.POINTER(ctypes.POINTER(Shard))]),
    "shmesh_global_array_gather": (I, [P, I, P]),
    "shmesh_strerror": (S, [I]),
    "shmesh_error_name": (S, [I]),
    "shmesh_last_error": (S, [P]),
    "shmesh_runtime_token": (Token, [P]),
    "shmesh_barrier_async": (I, [P, ctypes.POINTER(Token)]),
    "shmesh_effect_create": (I, [P, S, I, ctypes.POINTER(P)]),
    "shmesh_effect_name": (S, [P]),
    "shmesh_effect_kind_of": (I, [P]),
    "shmesh_effect_token": (Token, [P]),
    "shmesh_callback": (I, [P, P, I, CALLBACK_FN, P, ctypes.POINTER(Token)]),
    "shmesh_effects_barrier": (I, [P]),
    "shmesh_op_count": (I, []),
    "shmesh_op_get": (ctypes.POINTER(OpInfo), [I]),
}

# The library again, without declared argument types: the addresses of the
# functions the compiled module calls (bind, below), and barrier_async,
# which _futures calls with a c_void_p and the token's address.
raw = ctypes.CDLL(lib._name)

for _name, (_res, _args) in _PROTOS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args


# The library's op table (shmesh_op_count, shmesh_op_get), in its order.
# scope, sig and bus as lower-case names ("mesh", "reduction", "allreduce"),
# params a tuple of the names the table gives ("axis", "tiled?").
_SCOPES = ("world", "mesh")
_SIGS = ("internal", "world", "reduction", "axis_tiled", "all_to_all", "axis", "ragged",
         "ppermute", "pshuffle", "pbroadcast")
_BUSES = ("none", "zero", "allreduce", "spread", "one")


class Op(tuple):
    """One op of the library's table: (name, code, scope, sig, has_async,
    bool_input, bus, params)."""
    __slots__ = ()
    _fields = ("name", "code", "scope", "sig", "has_async", "bool_input", "bus", "params")

    def __new__(cls, *values):
        return tuple.__new__(cls, values)

    def __repr__(self):
        return "Op(%s)" % ", ".join("%s=%r" % kv for kv in zip(self._fields, self))


for _i, _f in enumerate(Op._fields):
    setattr(Op, _f, property(lambda self, _i=_i: self[_i]))


def _name_of(names, v):
    return names[v] if 0 <= v < len(names) else "?%d" % v


def _ops():
    out = []
    for i in range(lib.shmesh_op_count()):
        o = lib.shmesh_op_get(i).contents
        out.append(Op(o.name.decode(), o.code, _name_of(_SCOPES, o.scope), _name_of(_SIGS, o.sig),
                      bool(o.has_async), bool(o.bool_input), _name_of(_BUSES, o.bus),
                      tuple(o.params.decode().split())))
    return tuple(out)


OPS = _ops()


def load_ext():
    """The compiled module shmesh._ext for this interpreter, which makes
    every collective call: the installed one, else the one built beside the
    library loaded (build/python/).  ImportError, saying what to install,
    where there is neither."""
    try:
        from . import _ext
        return _ext
    except ImportError:
        pass
    # Only this interpreter's build of it (the first suffix names its ABI).
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    p = None
    if lib_path is not None:
        p = os.path.join(os.path.dirname(os.path.dirname(lib_path)), "python", "_ext" + suffix)
    if p is None or not os.path.exists(p):
        raise ImportError(
            "shmesh: the compiled module shmesh._ext (python/shmesh/_ext.c) is not built for "
            "this interpreter (%s, %s): it is built with the library where this interpreter's "
            "headers are (Debian: python3-dev; ./run.sh installs it) and numpy's; looked for %s"
            % (sys.executable, suffix, p or "it beside the library, which was not found"))
    spec = importlib.util.spec_from_file_location(__package__ + "._ext", p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _address(name):
    return ctypes.cast(getattr(raw, name), ctypes.c_void_p).value


# The compiled module, told the library's functions it calls: every
# collective (shmesh_op_call, shmesh_op_result), the mesh a call without
# one uses, and the tokens' wait and test.
ext = load_ext()
ext.bind(*[_address("shmesh_" + f) for f in ("op_call", "op_result", "mesh_current",
                                             "mesh_hash", "token_wait", "token_test",
                                             "token_wait_all", "token_wait_any")])
