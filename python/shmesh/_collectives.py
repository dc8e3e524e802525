"""The collectives (jax.lax's psum, all_gather, ppermute, ...) and their
_async forms: output shapes and dtypes, pytrees and buckets, the compiled
per-call path (_ext.c), and the op table's lists (_MESH_OPS, _WORLD_OPS).
The top of the array layers: above _arrays, _mesh, _futures and _interop."""
import ctypes

import numpy as np

from . import _arrays, _context, _lib
from ._lib import OPS
from ._errors import InvalidArgument
from ._context import _get_ident, _invalid, _raise_on
from ._arrays import (_CODES, _axes, _axis, _cint, _desc, _groups, _in_out, _out_slot, _prepare,
                      _shape_of, _tree_map)
from ._mesh import Mesh, _group_size, _mesh_ptr
from ._futures import _dispatch, _pending, _raw_pair
from ._interop import _COMPILED, _device_alloc, _header, _interop, _interop_async

# Every one goes through _call or _perm_call with a function of _lib.raw
# (no declared argument types: arrays and groups by reference, ints
# checked by _cint), one leaf of a pytree at a time.  Each op's body takes
# w: None for the blocking call, a list for its `_async` twin (the same
# checks and output shapes; the tokens of its leaves are appended to w).

_raw = _lib.raw


def _call(fn, what, mesh, axis_name, groups_arg, a, out_shape, out_dtype, w, *params):
    """fn (a blocking function of _lib.raw) on a prepared input a, into a new
    array of one device's shape out_shape (a leading axis of K added with K
    devices per rank).  With a list w, its _async form is dispatched
    instead (_dispatch) and the token appended to w."""
    mp = _mesh_ptr(mesh, what)
    axes = _axes(axis_name, what)
    gref = None if groups_arg is None else _groups(groups_arg, what)[1]
    return _run(fn, (mp, axes, gref), a, out_shape, out_dtype, w, params)


def _with_group_size(v, what, mesh, axis_name, axis_index_groups):
    """For an op whose output shape depends on the group size: the input,
    one device's shape of it, that size, and the call's (mesh pointer, axes
    text, groups reference) for _run, resolved once."""
    a = _prepare(v, what)
    g, gref = _groups(axis_index_groups, what)
    mp, axes = _mesh_ptr(mesh, what), _axes(axis_name, what)
    return a, _shape_of(a, what), _group_size(mp, axes, g, what), (mp, axes, gref)


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
    k = _context._local_devices
    out = _new_out(out_shape if k == 1 else (k, *out_shape), out_dtype, "shmesh")
    if w is None:
        rc = fn(*where, *params, *_in_out(a, out))
        if rc:
            _raise_on(rc, where[0])
    else:
        _dispatch(w, fn, (*where, *params, *_in_out(a, out)), (a, out, where[2], params))
    return out


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


def _leaves(x, name):
    """Pytree x's leaves, prepared (_prepare), and the tree of their indices."""
    leaves = []
    index_tree = _tree_map(lambda v: leaves.append(_prepare(v, name)) or len(leaves) - 1, x)
    return leaves, index_tree


def _buckets(leaves, bucket_bytes):
    """The leaves' indices in buckets, (dtype, indices) after one another: one
    dtype each, in tree order, at most bucket_bytes (a larger leaf alone),
    dtype after dtype in the order of their first leaves."""
    by_dtype = {}
    for i, a in enumerate(leaves):
        by_dtype.setdefault(a.dtype, []).append(i)
    for dt, idx in by_dtype.items():
        members, size = [], 0
        for i in idx:
            if members and size + leaves[i].nbytes > bucket_bytes:
                yield dt, members
                members, size = [], 0
            members.append(i)
            size += leaves[i].nbytes
        if members:
            yield dt, members


def _bucketed(fn, name, result_dtype, x, axis_name, groups, mesh, w, bucket_bytes):
    """An element-wise reduction of pytree x: its leaves of one dtype packed,
    in tree order, into buckets of at most bucket_bytes (a larger leaf goes
    alone, unpacked), one call per bucket; each leaf's result is a view of
    its bucket's.  Every element is reduced as in its own call (the library
    combines every element in group order whatever the array's size), so
    the bits are those of one call per leaf."""
    leaves, index_tree = _leaves(x, name)
    k = _context._local_devices
    results = [None] * len(leaves)
    for a in leaves:
        _shape_of(a, name)  # the device axis checked first, as per leaf

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

    for dt, members in _buckets(leaves, bucket_bytes):
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
        if (type(x) is np.ndarray and axis_index_groups is None
                and _context._local_devices == 1 and _context._ctx is not None
                and _get_ident() == _context._owner
                and (mesh is None or (type(mesh) is Mesh and mesh._p))
                and x.dtype in _CODES and x.flags.c_contiguous and x.ndim <= _context._MAX_NDIM):
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
    if np.issubdtype(dt, np.floating) or dt == _arrays._BF16:
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


def _address(name):
    return ctypes.cast(getattr(_raw, name), ctypes.c_void_p).value


def _compiled(op, kind, rule, kws):
    op = _interop(op)
    if _ext is None:
        return op
    # The state it reads at each call (_ctx, _owner, _local_devices) is
    # _context's, and a mesh argument must be exactly a Mesh.
    c = _COMPILED[op.__name__] = _ext.Collective(
        _address("shmesh_" + op.__name__), kind, rule, kws, op, _raise_on, _context.__dict__,
        Mesh, _address("shmesh_axis_size"))
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


def _by_leaf(name, x, impl, **kw):
    """A blocking collective of pytree x, leaf by leaf: each numpy leaf
    through the op's compiled callable (with the call's arguments kw), the
    others through impl(leaf), the op's Python path (which is where the
    compiled callable sends what it does not take: x itself never goes
    back to it, so nothing loops)."""
    fast = _COMPILED.get(name)
    if fast is None or type(x) is np.ndarray:
        return impl(x)
    args = kw.pop("args", ())
    return _tree_map(lambda v: fast(v, *args, **kw) if type(v) is np.ndarray else impl(v), x)


_unbucket_index = {}  # (group size, leaf sizes) -> the index that unpacks a gathered bucket


def _gather_bucketed(x, axis_name, groups, axis, tiled, mesh, bucket_bytes):
    """A blocking all_gather of pytree x in buckets: the leaves of one
    dtype, in tree order, flattened into buckets of at most bucket_bytes (a
    larger leaf alone), each bucket gathered along a new axis 0 in one call
    ((n, bucket elements)), and each leaf's result cut out of its bucket's:
    its column block, stacked (n, *shape), moved to `axis` (with tiled,
    merged into it), copied into its own array.  Pure data movement: the
    bytes of one call per leaf.  Every leaf's axis is checked first."""
    name = "all_gather"
    leaves, index_tree = _leaves(x, name)
    axes = [_axis(axis, a.ndim if tiled else a.ndim + 1, name) for a in leaves]
    results = [None] * len(leaves)
    gather = _COMPILED.get(name, all_gather)

    def flush(members):
        if len(members) == 1:
            i = members[0]
            results[i] = gather(leaves[i], axis_name, axis_index_groups=groups, axis=axis,
                                tiled=tiled, mesh=mesh, bucket_bytes=0)
            return
        out = gather(np.concatenate([leaves[i].reshape(-1) for i in members]), axis_name,
                     axis_index_groups=groups, mesh=mesh, bucket_bytes=0)
        n, off = out.shape[0], 0
        if all(axes[i] == 0 for i in members):
            # Along axis 0 each leaf's result is its column block of the
            # bucket's, row after row: one gather by index (kept per layout)
            # makes them all, each a contiguous slice of it.
            sizes = tuple(leaves[i].size for i in members)
            key = (n, sizes)
            idx = _unbucket_index.get(key)
            if idx is None:
                idx = np.concatenate([(np.arange(n)[:, None] * out.shape[1] + o +
                                       np.arange(sz)[None, :]).ravel()
                                      for o, sz in zip(np.cumsum((0,) + sizes[:-1]), sizes)])
                if len(_unbucket_index) >= 64:
                    _unbucket_index.clear()
                _unbucket_index[key] = idx
            flat = out.reshape(-1).take(idx)
            for i in members:
                a = leaves[i]
                shape = ((n * a.shape[0],) + a.shape[1:]) if tiled else (n,) + a.shape
                results[i] = flat[n * off:n * (off + a.size)].reshape(shape)
                off += a.size
            return
        for i in members:
            a = leaves[i]
            r = np.moveaxis(out[:, off:off + a.size].reshape((n,) + a.shape), 0, axes[i])
            if tiled:
                ax = axes[i]
                r = r.reshape(a.shape[:ax] + (n * a.shape[ax],) + a.shape[ax + 1:])
            results[i] = np.ascontiguousarray(r)
            off += a.size

    for _, members in _buckets(leaves, bucket_bytes):
        flush(members)
    return _tree_map(lambda i: results[i], index_tree)


def all_gather(x, axis_name, *, axis_index_groups=None, axis=0, tiled=False, mesh=None,
               bucket_bytes=0):
    """The group's inputs stacked along a new dimension `axis` (or
    concatenated along it with tiled=True), as jax.lax.all_gather.  With
    bucket_bytes, a pytree's leaves go in buckets of at most that many bytes
    (one device per rank); by default a call per leaf, which measured
    faster here (docs/python.md)."""
    b = _bucket_bytes(bucket_bytes, "all_gather")
    if b and type(x) is not np.ndarray and _context._local_devices == 1:
        return _gather_bucketed(x, axis_name, axis_index_groups, axis, tiled, mesh, b)
    return _by_leaf("all_gather", x,
                    lambda v: _all_gather(v, axis_name, axis_index_groups, axis, tiled, mesh, None),
                    args=(axis_name,), axis_index_groups=axis_index_groups, axis=axis,
                    tiled=tiled, mesh=mesh)


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
    return _by_leaf("psum_scatter", x,
                    lambda v: _psum_scatter(v, axis_name, scatter_dimension, axis_index_groups,
                                            tiled, mesh, None),
                    args=(axis_name,), scatter_dimension=scatter_dimension,
                    axis_index_groups=axis_index_groups, tiled=tiled, mesh=mesh)


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
    return _by_leaf("all_to_all", x,
                    lambda v: _all_to_all(v, axis_name, split_axis, concat_axis,
                                          axis_index_groups, tiled, mesh, None),
                    args=(axis_name, split_axis, concat_axis),
                    axis_index_groups=axis_index_groups, tiled=tiled, mesh=mesh)


def all_to_all_async(x, axis_name, split_axis, concat_axis, *, axis_index_groups=None,
                     tiled=False, mesh=None):
    return _pending(_all_to_all, x, axis_name, split_axis, concat_axis, axis_index_groups,
                    tiled, mesh)


all_gather = _compiled(all_gather, _ALL_GATHER, _SAME, _KW_GROUPS | _KW_BUCKET)
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
    return _by_leaf("pswapaxes", x,
                    lambda v: _pswapaxes(v, axis_name, axis, axis_index_groups, mesh, None),
                    args=(axis_name, axis), axis_index_groups=axis_index_groups, mesh=mesh)


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
    return _by_leaf("ppermute", x, lambda v: _ppermute(v, axis_name, perm, mesh, None),
                    args=(axis_name, perm), mesh=mesh)


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
    return _by_leaf("pshuffle", x, lambda v: _pshuffle(v, axis_name, perm, mesh, None),
                    args=(axis_name, perm), mesh=mesh)


def pshuffle_async(x, axis_name, perm, *, mesh=None):
    return _pending(_pshuffle, x, axis_name, perm, mesh)


def _pbroadcast(x, axis_name, source, mesh, w):
    return _perm_call(_raw.shmesh_pbroadcast, "pbroadcast", x, axis_name, mesh,
                      (_cint(source, "pbroadcast", "source"),), w)


def pbroadcast(x, axis_name, source, *, mesh=None):
    """Every device of the group gets the input of group index `source`."""
    return _by_leaf("pbroadcast", x, lambda v: _pbroadcast(v, axis_name, source, mesh, None),
                    args=(axis_name, source), mesh=mesh)


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
        if _name != "ragged_all_to_all_async":  # (its blocking form takes numpy alone too)
            globals()[_name] = _interop_async(globals()[_name])
