"""Meshes (jax.sharding.Mesh): making one, entering it, the mesh pointer a
call passes, and axis_index and axis_size.  Above _arrays."""
import ctypes
import weakref

import numpy as np

from . import _context
from ._lib import lib
from ._errors import _raise
from ._context import _c, _checked, _invalid, _own, _raise_on
from ._arrays import _axes, _cint

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
        _context._meshes.add(self)

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
        if _context._ctx is not None and getattr(self, "_p", None) and not self._pushed:
            self._destroy()


def axis_index(axis_name, *, mesh=None):
    """This device's index along the named axes (row-major over them); with
    several devices per rank, an int32 array of one index per device
    (Mesh.local_devices order)."""
    mp = _mesh_ptr(mesh, "axis_index", local=True)
    axes = _axes(axis_name, "axis_index")
    i = ctypes.c_int()
    if _context._local_devices == 1:
        rc = lib.shmesh_axis_index(mp, axes, ctypes.byref(i))
        if rc:
            _raise_on(rc, mp)
        return np.int32(i.value)
    if mp is None:
        mp = lib.shmesh_mesh_current()
        if not mp:
            _invalid("axis_index: no mesh given and none entered (with mesh: ...)")
    out = np.empty(_context._local_devices, np.int32)
    for j, dev in enumerate(_local_devices_of(mp)):
        rc = lib.shmesh_axis_index_of(mp, axes, dev, ctypes.byref(i))
        if rc:
            _raise(rc, _context._ctx)
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


def _local_devices_of(mp):
    """This rank's device ids in the mesh mp (a pointer), in mesh order."""
    n = lib.shmesh_mesh_size(mp)
    ids = (ctypes.c_int * max(n, 1))()
    k = _checked(lib.shmesh_mesh_local_devices, mp, ids, n)
    return [ids[i] for i in range(k)]
