"""Partition specs, shardings and global arrays (jax.sharding's
PartitionSpec and NamedSharding, jax.Array): make_array_from_callback,
make_array_from_single_device_arrays, device_put and GlobalArray's shards
and gather.  Above _mesh."""
import ctypes
import operator
import weakref

import numpy as np

from . import _context, _lib
from ._lib import lib
from ._errors import Error, InvalidArgument
from ._context import _checked, _invalid, _own, rank
from ._arrays import _CODES, _cint, _code, _index, _name_ok, _prepare, _ptr
from ._mesh import Mesh, _local_devices_of

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
        if _context._ctx is not None and getattr(self, "_p", None):
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
        if _context._ctx is not None and getattr(self, "_p", None):
            self._destroy()


def _array_call(sharding, shape, what):
    """The checks a global array's constructor `what` makes first, in
    order: a NamedSharding, the shape (_shape_arg), this thread's context;
    then its (shape, C shape, sharding pointer)."""
    if not isinstance(sharding, NamedSharding):
        _invalid("%s: sharding must be a shmesh.NamedSharding, got %r" % (what, sharding))
    shape, cshape = _shape_arg(shape, what)
    _own(what)
    return shape, cshape, sharding._ptr()


def make_array_from_callback(shape, sharding, data_callback, dtype=None):
    """jax.make_array_from_callback: a GlobalArray of `shape` whose shard on
    each local device is data_callback(index), index that device's block as
    a tuple of slices (so a global numpy array g gives it as g[index]).
    Local (not collective): every rank should make the same arrays.  With
    dtype None, the dtype is that of the first block the callback returns."""
    what = "make_array_from_callback"
    shape, cshape, sp = _array_call(sharding, shape, what)
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
    shape, cshape, sp = _array_call(sharding, shape, what)
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
