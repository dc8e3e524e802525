"""Arrays of other libraries: a collective's leaves that are torch tensors
or DLPack tensors in host memory go in as numpy arrays sharing their memory
and come back as their kind (_interop, the wrapper of every collective;
out=), and DLPack tensors in GPU memory take the device path, their result a
DeviceArray.  Above _arrays; the collectives (_collectives) are wrapped by
it, and fill _COMPILED."""
import ctypes
import functools
import sys
import weakref

import numpy as np

from . import _context
from ._lib import lib
from ._context import _c, _checked, _invalid
from ._arrays import _cint, _out_slot, _tree_map

# The compiled callable of each collective (_collectives._compiled), by
# name, for pytrees' leaves and buckets: the wrapper below is made before
# it, and calls it for the leaves it converted.
_COMPILED = {}


# ---- arrays of other libraries: DLPack, PyTorch ------------------------------

_KDL_CPU = 1  # DLPack's kDLCPU


_BACKS = {}  # type -> _back_to's answer


# Packages whose arrays' module has no from_dlpack of its own: where it is.
_FROM_DLPACK = {"jaxlib": "jax.numpy", "jax": "jax.numpy"}


def _dlpack_consumer(v):
    """The from_dlpack of v's package (torch.from_dlpack, jax.numpy's for a
    jaxlib array, ...), or None."""
    top = type(v).__module__.split(".")[0]
    return getattr(sys.modules.get(_FROM_DLPACK.get(top, top)), "from_dlpack", None)


def _back_to(v):
    """How a result goes back to v's kind of array: torch.from_numpy for a
    torch tensor (no copy; it takes bool, which DLPack does not), else the
    producer's package's from_dlpack where it has one, else nothing (the
    result stays a numpy array)."""
    tp = type(v)
    try:
        return _BACKS[tp]
    except KeyError:
        pass
    top = tp.__module__.split(".")[0]
    mod = sys.modules.get(top)
    back = _dlpack_consumer(v)
    if top == "torch" and mod is not None:
        back = mod.from_numpy
    if len(_BACKS) < 64:
        _BACKS[tp] = back
    return back


# ---- device memory through DLPack ---------------------------------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DL_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", _DL_DELETER)]


_KDL_DEVICES = {2: "CUDA", 10: "ROCm"}  # DLPack's kDLCUDA, kDLROCM: the device path's
# DLPack's (type code, bits) of the dtypes shmesh has (kDLInt 0, kDLUInt 1,
# kDLFloat 2, kDLBool 6), and back.
_DL_TYPES = {(0, 8): np.int8, (0, 16): np.int16, (0, 32): np.int32, (0, 64): np.int64,
             (1, 8): np.uint8, (1, 16): np.uint16, (1, 32): np.uint32, (1, 64): np.uint64,
             (2, 16): np.float16, (2, 32): np.float32, (2, 64): np.float64, (6, 8): np.bool_}
_DL_CODES = {np.dtype(t): k for k, t in _DL_TYPES.items()}
_DLTENSOR = b"dltensor"  # the capsules' name (kept: a capsule keeps only its pointer)
_pyapi = ctypes.pythonapi
_pyapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_pyapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_pyapi.PyCapsule_IsValid.restype = ctypes.c_int
_pyapi.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# The same function on a capsule's address: in a capsule's destructor, where
# the capsule (at no references) must not be made a Python object again.
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _pyapi))
_pyapi.PyCapsule_New.restype = ctypes.py_object
_pyapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]


def _header(ptr, shape, dtype):
    """A numpy array over `ptr` (device memory: never read here, only its
    address and shape handed to the library)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if n == 0 or not ptr:
        return np.empty(shape, dtype)
    return np.frombuffer((ctypes.c_char * n).from_address(ptr), dtype).reshape(shape)


def _device_view(v, what):
    """A DLPack tensor in device memory as a numpy header over it (_header)
    and its device id; the capsule is held (its producer keeps the memory)
    for as long as the header lives."""
    cap = v.__dlpack__()
    m = _DLManagedTensor.from_address(_pyapi.PyCapsule_GetPointer(cap, _DLTENSOR))
    t = m.dl_tensor
    dt = _DL_TYPES.get((t.dtype.code, t.dtype.bits)) if t.dtype.lanes == 1 else None
    if dt is None:
        _invalid("%s: a device tensor of DLPack type code %d, %d bits, %d lanes: not a dtype "
                 "shmesh has (bool, int8..int64, uint8..uint64, float16, float32, float64)"
                 % (what, t.dtype.code, t.dtype.bits, t.dtype.lanes))
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides:
        want, size = [], 1
        for n in reversed(shape):
            want.insert(0, size)
            size *= n
        if any(t.strides[i] != want[i] for i in range(t.ndim) if shape[i] > 1):
            _invalid("%s: a device tensor that is not contiguous (strides %s, shape %s): pass "
                     "x.contiguous()" % (what, [t.strides[i] for i in range(t.ndim)],
                                          list(shape)))
    a = _header((t.data or 0) + t.byte_offset, shape, dt)
    _device_keep[id(a)] = (cap, v)
    weakref.finalize(a, _device_keep.pop, id(a), None)
    return a, int(t.device.device_id)


_device_keep = {}  # id(header) -> (capsule, producer), while the header lives
_exports = {}      # address of an exported DLManagedTensor -> what it holds


@_DL_DELETER
def _dl_deleter(p):
    """The consumer is done with an exported tensor."""
    _exports.pop(p, None)


@_CAPSULE_DESTRUCTOR
def _dl_capsule_gone(cap):
    """An exported capsule freed: not consumed (still named "dltensor"),
    its tensor is released here."""
    if _pyapi.PyCapsule_IsValid(cap, _DLTENSOR):
        _exports.pop(_capsule_pointer(cap, _DLTENSOR), None)


class DeviceArray:
    """An array in a GPU runtime's device memory (a result of a collective
    on a DLPack device tensor, or device_array()): DLPack exports it
    (torch.from_dlpack and the like take it without a copy), numpy() copies
    it to the host.  Freed with its last reference (and at finalize)."""

    __slots__ = ("_ptr", "shape", "dtype", "_device", "_gen", "__weakref__")

    def __init__(self, ptr, shape, dtype, device):
        self._ptr, self.shape, self.dtype = ptr, tuple(shape), np.dtype(dtype)
        self._device = device  # (DLPack device type, this process's device number)
        self._gen = _context._gen

    @property
    def nbytes(self):
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def __dlpack_device__(self):
        return self._device

    def __dlpack__(self, stream=None):
        self._live("__dlpack__")
        shape = (ctypes.c_int64 * max(len(self.shape), 1))(*self.shape)
        code, bits = _DL_CODES[self.dtype]
        m = _DLManagedTensor(_DLTensor(self._ptr, _DLDevice(*self._device), len(self.shape),
                                       _DLDataType(code, bits, 1), shape, None, 0),
                             None, _dl_deleter)
        p = ctypes.addressof(m)
        _exports[p] = (m, shape, self)  # until the consumer calls the deleter
        return _pyapi.PyCapsule_New(p, _DLTENSOR, _dl_capsule_gone)

    def _live(self, what):
        if self._gen != _context._gen or not self._ptr and self.nbytes:
            _invalid("DeviceArray.%s: its memory went with the context (finalize)" % what)

    def numpy(self):
        """A host copy (shmesh_device_copy)."""
        self._live("numpy")
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            _checked(lib.shmesh_device_copy, _c(), out.ctypes.data, self._ptr, self.nbytes)
        return out

    def __repr__(self):
        return "DeviceArray(shape=%r, dtype=%s, device=%r)" % (self.shape, self.dtype,
                                                              self._device)

    def __del__(self):
        try:
            if self._ptr and _context._ctx is not None and self._gen == _context._gen:
                lib.shmesh_device_free(_context._ctx, self._ptr)
        except Exception:  # at interpreter exit, the module may be half gone
            pass


def device_array(x, device=0, *, kind=2):
    """x (a numpy array) copied into device memory of this process's GPU
    `device` (shmesh_device_alloc: the runtime's own allocator), as a
    DeviceArray; kind: its DLPack device type (2, CUDA; 10, ROCm)."""
    a = np.ascontiguousarray(x)
    if a.dtype not in _DL_CODES:
        _invalid("device_array: dtype %s is not one the device path takes" % a.dtype)
    r = _device_alloc(a.shape, a.dtype, _cint(device, "device_array", "device"), kind)
    if a.nbytes:
        _checked(lib.shmesh_device_copy, _c(), r._ptr, a.ctypes.data, a.nbytes)
    return r


def _device_alloc(shape, dtype, device, kind):
    n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    p = ctypes.c_void_p()
    if n:
        _checked(lib.shmesh_device_alloc, _c(), device, n, ctypes.byref(p))
    return DeviceArray(p.value, shape, dtype, (kind, device))


def _from_foreign(v, what):
    """A leaf that is not a numpy array as one, without a copy where it can
    be: DLPack (__dlpack__, numpy's from_dlpack) for CPU tensors, else
    numpy's own conversion (the buffer protocol, __array_interface__,
    __array__: torch's bool tensors, which DLPack does not carry).  With the
    function that turns a result back into v's kind, or None.  A torch
    tensor is asked the same through its own attributes, which cost less
    than its __dlpack_device__ (1.7 us)."""
    if type(v).__module__ == "torch":
        if not v.is_cpu:
            _invalid("%s: a torch tensor on %s: only CPU tensors are taken so far (x.cpu())"
                     % (what, v.device))
        if v.requires_grad:
            _invalid("%s: a tensor that requires grad; pass x.detach() (gradients do not flow "
                     "through shmesh's collectives)" % what)
        return v.numpy(), _back_to(v)  # its memory, as numpy (bool too)
    dev = getattr(v, "__dlpack_device__", None)
    if dev is not None and hasattr(v, "__dlpack__"):
        kind = int(dev()[0])
        if kind != _KDL_CPU:
            _invalid("%s: a DLPack tensor on device type %d (%s): pass device tensors alone, "
                     "not in a pytree nor with out=" % (what, kind,
                                                        _KDL_DEVICES.get(kind, "not a GPU")))
        if getattr(v, "requires_grad", False):
            _invalid("%s: a tensor that requires grad; pass x.detach() (gradients do not flow "
                     "through shmesh's collectives)" % what)
        try:
            return np.from_dlpack(v), _back_to(v)
        except (RuntimeError, BufferError, TypeError):
            pass  # a dtype DLPack does not carry: numpy's own conversion below
    return np.asarray(v), _back_to(v) if dev is not None else None


def _on_gpu(x):
    """Whether x is a DLPack tensor in GPU memory (the device path's)."""
    return hasattr(x, "__dlpack_device__") and int(x.__dlpack_device__()[0]) in _KDL_DEVICES


def _numpy_leaves(x, name):
    """Pytree x with its other libraries' leaves as numpy arrays on their
    memory (_from_foreign), and per leaf, in tree order, the function that
    turns its result back into its kind (None: keep it as it is)."""
    backs = []

    def take(v):
        if isinstance(v, (np.ndarray, np.generic, int, float, bool, complex)):
            backs.append(None)
            return v
        a, back = _from_foreign(v, name)
        backs.append(back)
        return a
    return _tree_map(take, x), backs


def _give_back(r, backs):
    """Result tree r with each leaf turned back into its input's kind."""
    it = iter(backs)
    return _tree_map(lambda out: (lambda b: out if b is None else b(out))(next(it)), r)


def _interop(fn):
    """fn (a collective's Python function, x its first argument) taking
    pytrees whose leaves are other libraries' arrays too: each such leaf
    goes in as a numpy array sharing its memory (_from_foreign), and its
    result comes back as its kind (a torch tensor for a torch tensor,
    sharing the result's memory)."""
    @functools.wraps(fn)
    def op(x, *args, out=None, **kw):
        if out is not None:
            return _into(fn, out, x, args, kw)
        if type(x) is np.ndarray:
            return fn(x, *args, **kw)
        if _on_gpu(x):
            return _on_device(fn, x, args, kw)
        if hasattr(x, "__dlpack__"):  # one tensor: no tree to walk
            a, back = _from_foreign(x, fn.__name__)
            r = _COMPILED.get(fn.__name__, fn)(a, *args, **kw)
            return r if back is None else back(r)
        x2, backs = _numpy_leaves(x, fn.__name__)
        if not any(backs):
            return fn(x2, *args, **kw)
        return _give_back(_COMPILED.get(fn.__name__, fn)(x2, *args, **kw), backs)
    return op


def _interop_async(fn):
    """fn, an _async form, taking other libraries' host arrays as _interop's
    functions do: each such leaf goes in as a numpy array sharing its
    memory, and the Pending's result gives each leaf's result back as its
    kind, sharing the result's memory (written once the work is done: read
    it after block_until_ready, as any async result)."""
    @functools.wraps(fn)
    def op(x, *args, **kw):
        if type(x) is np.ndarray:
            return fn(x, *args, **kw)
        if _on_gpu(x):
            _invalid("%s: a DLPack tensor in GPU memory: the _async forms take host arrays so "
                     "far (the blocking form takes it)" % fn.__name__)
        x2, backs = _numpy_leaves(x, fn.__name__)
        p = fn(x2, *args, **kw)
        if any(backs):
            p._result = _give_back(p._result, backs)
        return p
    return op


def _on_device(fn, x, args, kw):
    """fn's call on a DLPack tensor in GPU memory: the device path, its
    result a DeviceArray on the same device (given back to x's kind through
    its package's from_dlpack where it has one)."""
    name = fn.__name__
    kind = int(x.__dlpack_device__()[0])
    if getattr(x, "requires_grad", False):
        _invalid("%s: a tensor that requires grad; pass x.detach() (gradients do not flow "
                 "through shmesh's collectives)" % name)
    a, device = _device_view(x, name)
    made = []
    _out_slot.device = (device, kind, made)
    try:
        fn(a, *args, **kw)
    finally:
        _out_slot.device = None
    r = made[0]
    # (for torch too: torch.from_dlpack, as torch.from_numpy takes host memory only)
    back = _dlpack_consumer(x)
    return r if back is None else back(r)


def _into(fn, out, x, args, kw):
    """fn's call with out=: the result written into `out` (a numpy array, or
    a tensor whose memory a numpy array shares), which is returned."""
    name = fn.__name__
    if isinstance(x, (dict, list, tuple)):
        _invalid("%s: out= takes the result of one array, not of a pytree" % name)
    o = out
    if type(out) is not np.ndarray:
        if not hasattr(out, "__dlpack__") and not hasattr(out, "__array_interface__"):
            _invalid("%s: out= must be an array (numpy, or a tensor on the CPU), got %s"
                     % (name, type(out).__name__))
        o = _from_foreign(out, name)[0]
    if type(x) is not np.ndarray and (hasattr(x, "__dlpack__") or
                                      hasattr(x, "__array_interface__")):
        x = _from_foreign(x, name)[0]
    _out_slot.a = o
    try:
        fn(x, *args, **kw)
    finally:
        _out_slot.a = None
    return out
