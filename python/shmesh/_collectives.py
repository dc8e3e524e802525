"""The collectives (jax.lax's psum, all_gather, ppermute, ...) and their
_async forms: pytrees and buckets, and the compiled module (_ext.c) that
makes every call: its Collective callables take the common case whole,
and _leaf every other array (groups, several axes, several devices per
rank, _async forms, tensors), both through the library's one entry for
every op (shmesh_op_call) with the result's dtype and shape asked from it
(shmesh_op_result).  Also the op table's lists (_MESH_OPS, _WORLD_OPS).
The top of the array layers: above _arrays, _mesh, _futures and _interop."""
import ctypes

import numpy as np

from . import _context, _lib
from ._lib import OPS
from ._errors import InvalidArgument
from ._context import _invalid, _raise_on
from ._arrays import (_CODES, _axes, _axis, _cint, _groups, _out_slot, _prepare, _shape_of,
                      _tree_map)
from ._mesh import Mesh, _mesh_ptr
from ._futures import Token, _dispatch, _dispatched, _pending
from ._interop import _COMPILED, _device_alloc, _header, _interop, _interop_async

_ext = _lib.ext  # (_lib loads it, and raises ImportError where it was not built)
_CODE = {o.name: o.code for o in OPS}


def _leaf(name, v, axis_name, groups, mesh, w, axis=0, axis2=0, tiled=False, source=0,
          perm=None, nperm=0):
    """One array's call of op `name` (the op's keywords as shmesh_op_args
    has them), as _ext's callables make the common case: its result's shape
    and dtype asked from the library, the result made, the call made, in
    one _ext.call where the result is a new host array, else (out=, device
    memory: _new_out; a dtype numpy lacks) asked first.  With a list w, its
    _async form is dispatched instead (_dispatch) and the token appended to
    w."""
    a = _prepare(v, name)
    _shape_of(a, name)
    mp = _mesh_ptr(mesh, name)
    axes = _axes(axis_name, name)
    k = _context._local_devices
    # axis_index_groups as given: the module reads plain lists of ints, and
    # answers None for anything else, which _groups checks and builds.
    g = groups if groups is None or type(groups) in (list, tuple) else _groups(groups, name)[0]

    def args():
        return (_CODE[name], mp.value if mp is not None else 0, axes,
                g if g is None or type(g) in (list, tuple) else ctypes.addressof(g), axis, axis2,
                tiled, source, perm, nperm, a, _CODES[a.dtype], k)
    call = args()
    out, code = None, -1
    if _out_slot.a is not None or _out_slot.device is not None:
        r = _ext.result(*call)
        if r is None:
            g = _groups(groups, name)[0]
            call = args()
            r = _ext.result(*call)
        if type(r) is int:
            _raise_on(r, mp)
        shape, code = r
        out = _new_out(shape if k == 1 else (k, *shape), _dtype(code), name)
    for _ in range(3):
        if w is None:
            r = _ext.call(*call, out, code, 0, None)
        else:
            r = _dispatch(w, lambda t: _ext.call(*call, out, code, t, None), (a, g, out), mp)
        if r is None:  # groups the module did not read: checked and built here
            g = _groups(groups, name)[0]
            call = args()
            continue
        if type(r) is tuple:  # a dtype numpy has only through the package's table: made here
            shape, code = r
            out = _new_out(shape if k == 1 else (k, *shape), _dtype(code), name)
            continue
        if type(r) is int:
            if r:
                _raise_on(r, mp)
            return out
        return r


def _dtype(code):
    """numpy's dtype of shmesh's dtype code: _arrays' table's (which a
    program may extend: _CODES, _BF16)."""
    for dt, c in _CODES.items():
        if c == code:
            return dt
    _invalid("shmesh: the result's dtype (code %d) has no numpy dtype here (bfloat16 needs "
             "the ml_dtypes package)" % code)


def _new_out(shape, dtype, what):
    """The result's array of `shape` and `dtype`: a new one, or the call's
    out= array, checked: exactly that shape and dtype, C-contiguous and
    writable (it is written in place)."""
    o = _out_slot.a
    dev = _out_slot.device
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


def _bucketed(name, x, axis_name, groups, mesh, w, bucket_bytes):
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

    def flush(members):
        if len(members) == 1:
            results[members[0]] = _one(name, leaves[members[0]], axis_name, groups, mesh, w)
            return
        parts = [leaves[i].reshape((k, leaves[i].size // k) if k > 1 else leaves[i].size)
                 for i in members]
        out = _one(name, np.concatenate(parts, axis=-1), axis_name, groups, mesh, w)
        off = 0
        for i, part in zip(members, parts):
            n = part.shape[-1]
            results[i] = out[..., off:off + n].reshape(leaves[i].shape)
            off += n

    for _, members in _buckets(leaves, bucket_bytes):
        flush(members)
    return _tree_map(lambda i: results[i], index_tree)


def _one(name, a, axis_name, groups, mesh, w):
    """One array of a reduction's pytree through the op's compiled callable:
    the blocking one (w None), or its _async form, whose token goes to w;
    what is no numpy array, and what the callables do not take (through the
    op's Python function, which takes one array straight to _leaf: no
    loop), goes to _leaf."""
    f = (_COMPILED if w is None else _COMPILED_ASYNC).get(name)
    if f is None or type(a) is not np.ndarray:
        return _leaf(name, a, axis_name, groups, mesh, w)
    if w is None:
        return f(a, axis_name, mesh=mesh, axis_index_groups=groups)
    p = f(a, axis_name, mesh=mesh, axis_index_groups=groups)
    w.extend(p._tokens)
    return p._result


def _reduce(name):
    def body(x, axis_name, axis_index_groups, mesh, bucket_bytes, w):
        """What the compiled callables did not take (w None: the blocking
        form; a list: the _async form's tokens): one array through _leaf, a
        pytree's leaves through the callables one by one, or in buckets."""
        if type(x) is np.ndarray:
            return _leaf(name, x, axis_name, axis_index_groups, mesh, w)
        if bucket_bytes:
            return _bucketed(name, x, axis_name, axis_index_groups, mesh, w, bucket_bytes)
        return _tree_map(lambda v: _one(name, v, axis_name, axis_index_groups, mesh, w), x)

    def op(x, axis_name, *, axis_index_groups=None, mesh=None, bucket_bytes=BUCKET_BYTES):
        return body(x, axis_name, axis_index_groups, mesh, _bucket_bytes(bucket_bytes, name),
                    None)

    def op_async(x, axis_name, *, axis_index_groups=None, mesh=None,
                 bucket_bytes=BUCKET_BYTES):
        return _pending(body, x, axis_name, axis_index_groups, mesh,
                        _bucket_bytes(bucket_bytes, name + "_async"))
    op.__name__ = op.__qualname__ = name
    op_async.__name__ = op_async.__qualname__ = name + "_async"
    return op, op_async


def _async_doc(blocking):
    return ("%s's async form: the same arguments and checks (an error raises here, and nothing "
            "is dispatched); returns a Pending whose block_until_ready() gives %s's result. "
            "The input must not be modified until the work is done." % (blocking, blocking))


psum, psum_async = _reduce("psum")
psum.__doc__ = "Sum over the named axes (jax.lax.psum); bool sums to int32."
pmax, pmax_async = _reduce("pmax")
pmax.__doc__ = "Element-wise maximum over the named axes (jax.lax.pmax)."
pmin, pmin_async = _reduce("pmin")
pmin.__doc__ = "Element-wise minimum over the named axes (jax.lax.pmin)."
pmean, pmean_async = _reduce("pmean")
pmean.__doc__ = ("Mean over the named axes (jax.lax.pmean); integer inputs give float32 "
                 "(float64 for 64-bit ones).")


def _argreduce(name):
    def body(x, axis_name, mesh, w):
        return _tree_map(lambda v: _leaf(name, v, axis_name, None, mesh, w), x)

    def op(x, axis_name, *, mesh=None):
        return _by_leaf(name, x, lambda v: _leaf(name, v, axis_name, None, mesh, None),
                        args=(axis_name,), mesh=mesh)

    def op_async(x, axis_name, *, mesh=None):
        return _pending(body, x, axis_name, mesh)
    op.__name__ = op.__qualname__ = name
    op_async.__name__ = op_async.__qualname__ = name + "_async"
    return op, op_async


pargmax, pargmax_async = _argreduce("pargmax")
pargmax.__doc__ = "The axis index holding the maximum, element-wise (int32; one axis)."
pargmin, pargmin_async = _argreduce("pargmin")
pargmin.__doc__ = "The axis index holding the minimum, element-wise (int32; one axis)."


_KIND, _KWS = {}, {}  # each compiled op's _ext kind and keywords, for its _async form's
_COMPILED_ASYNC = {}  # the _async forms' compiled callables, by the op's name


def _compiled(op, kind, kws):
    """op's compiled callable: the common case in C (one contiguous numpy
    array, one axis name, groups as plain lists or none, one device per
    rank, the context's thread), anything else to op (through _interop's
    tensors first)."""
    op = _interop(op)
    # The state it reads at each call is what _context publishes (_publish),
    # and a mesh argument must be exactly a Mesh.
    _KIND[op.__name__], _KWS[op.__name__] = kind, kws
    c = _COMPILED[op.__name__] = _ext.Collective(_CODE[op.__name__], kind, kws, op, _raise_on,
                                                 Mesh)
    return c


# _ext.c's enum kind and its keywords
_REDUCE, _ALL_GATHER, _PSUM_SCATTER, _ALL_TO_ALL, _PSWAPAXES, _PPERMUTE, _PSHUFFLE, \
    _PBROADCAST = range(8)
_KW_GROUPS, _KW_BUCKET = 1, 2
psum = _compiled(psum, _REDUCE, _KW_GROUPS | _KW_BUCKET)
pmax = _compiled(pmax, _REDUCE, _KW_GROUPS | _KW_BUCKET)
pmin = _compiled(pmin, _REDUCE, _KW_GROUPS | _KW_BUCKET)
pmean = _compiled(pmean, _REDUCE, _KW_GROUPS | _KW_BUCKET)
pargmax = _compiled(pargmax, _REDUCE, 0)
pargmin = _compiled(pargmin, _REDUCE, 0)


def _all_gather(x, axis_name, axis_index_groups, axis, tiled, mesh, w):
    ax = _cint(axis, "all_gather", "axis")
    return _tree_map(lambda v: _leaf("all_gather", v, axis_name, axis_index_groups, mesh, w,
                                     axis=ax, tiled=bool(tiled)), x)


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
    d = _cint(scatter_dimension, "psum_scatter", "scatter_dimension")
    return _tree_map(lambda v: _leaf("psum_scatter", v, axis_name, axis_index_groups, mesh, w,
                                     axis=d, tiled=bool(tiled)), x)


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
    s = _cint(split_axis, "all_to_all", "split_axis")
    c = _cint(concat_axis, "all_to_all", "concat_axis")
    return _tree_map(lambda v: _leaf("all_to_all", v, axis_name, axis_index_groups, mesh, w,
                                     axis=s, axis2=c, tiled=bool(tiled)), x)


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


all_gather = _compiled(all_gather, _ALL_GATHER, _KW_GROUPS | _KW_BUCKET)
psum_scatter = _compiled(psum_scatter, _PSUM_SCATTER, _KW_GROUPS)
all_to_all = _compiled(all_to_all, _ALL_TO_ALL, _KW_GROUPS)


def _pswapaxes(x, axis_name, axis, axis_index_groups, mesh, w):
    ax = _cint(axis, "pswapaxes", "axis")
    return _tree_map(lambda v: _leaf("pswapaxes", v, axis_name, axis_index_groups, mesh, w,
                                     axis=ax), x)


def pswapaxes(x, axis_name, axis, *, axis_index_groups=None, mesh=None):
    """Swaps the named axis with dimension `axis` (jax.lax.pswapaxes)."""
    return _by_leaf("pswapaxes", x,
                    lambda v: _pswapaxes(v, axis_name, axis, axis_index_groups, mesh, None),
                    args=(axis_name, axis), axis_index_groups=axis_index_groups, mesh=mesh)


def pswapaxes_async(x, axis_name, axis, *, axis_index_groups=None, mesh=None):
    return _pending(_pswapaxes, x, axis_name, axis, axis_index_groups, mesh)


def _ppermute(x, axis_name, perm, mesh, w):
    try:
        pairs = [(_cint(s, "ppermute", "perm"), _cint(d, "ppermute", "perm")) for s, d in perm]
    except InvalidArgument:
        raise  # _cint's: an entry out of range
    except (TypeError, ValueError):
        _invalid("ppermute: perm must be a list of (source, destination) pairs, got %r" % (perm,))
    flat = [i for p in pairs for i in p]
    return _tree_map(lambda v: _leaf("ppermute", v, axis_name, None, mesh, w, perm=flat,
                                     nperm=len(pairs)), x)


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
    # (the library checks that it has one entry per member of the axes' groups)
    return _tree_map(lambda v: _leaf("pshuffle", v, axis_name, None, mesh, w, perm=p,
                                     nperm=len(p)), x)


def pshuffle(x, axis_name, perm, *, mesh=None):
    """Group index i receives the input of group index perm[i] (jax.lax.pshuffle)."""
    return _by_leaf("pshuffle", x, lambda v: _pshuffle(v, axis_name, perm, mesh, None),
                    args=(axis_name, perm), mesh=mesh)


def pshuffle_async(x, axis_name, perm, *, mesh=None):
    return _pending(_pshuffle, x, axis_name, perm, mesh)


def _pbroadcast(x, axis_name, source, mesh, w):
    src = _cint(source, "pbroadcast", "source")
    return _tree_map(lambda v: _leaf("pbroadcast", v, axis_name, None, mesh, w, source=src), x)


def pbroadcast(x, axis_name, source, *, mesh=None):
    """Every device of the group gets the input of group index `source`."""
    return _by_leaf("pbroadcast", x, lambda v: _pbroadcast(v, axis_name, source, mesh, None),
                    args=(axis_name, source), mesh=mesh)


def pbroadcast_async(x, axis_name, source, *, mesh=None):
    return _pending(_pbroadcast, x, axis_name, source, mesh)


pswapaxes = _compiled(pswapaxes, _PSWAPAXES, _KW_GROUPS)
ppermute = _compiled(ppermute, _PPERMUTE, 0)
pshuffle = _compiled(pshuffle, _PSHUFFLE, 0)
pbroadcast = _compiled(pbroadcast, _PBROADCAST, 0)


def _ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes,
                       axis_name, axis_index_groups, mesh, w):
    what = "ragged_all_to_all"
    a = _prepare(operand, what)
    out = np.array(_prepare(output, what), copy=True)
    ints = tuple(_prepare(v, what) for v in (input_offsets, send_sizes, output_offsets,
                                             recv_sizes))
    for v in (a, out) + ints:
        _shape_of(v, what)
    mp = _mesh_ptr(mesh, what)
    g = _groups(axis_index_groups, what)[0]
    call = (_CODE[what], mp.value if mp is not None else 0, _axes(axis_name, what),
            ctypes.addressof(g) if g is not None else 0, 0, 0, False, 0, None, 0, a,
            _CODES[a.dtype], _context._local_devices, out, _CODES[out.dtype])
    if w is None:
        rc = _ext.call(*call, 0, ints)
        if rc:
            _raise_on(rc, mp)
    else:
        _dispatch(w, lambda t: _ext.call(*call, t, ints), (a, out, ints, g), mp)
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
        _blocking = _COMPILED.get(_name[:-6])
        if _blocking is not None:  # the _async form's callable: the blocking one's kind
            globals()[_name] = _COMPILED_ASYNC[_name[:-6]] = _ext.Collective(
                _CODE[_name[:-6]], _KIND[_name[:-6]], _KWS[_name[:-6]], globals()[_name],
                _raise_on, Mesh, Token, _dispatched)
