"""DLPack tensors in device memory onto the device path, over the fake GPU
runtime (tests/fake_gpu: its device pointers are PROT_NONE in the host
view, so any host read of one faults).  Run by the python-device test
(SHMESH_DEVICE names the fake); skipped, on every rank alike, elsewhere."""
import os

import numpy as np
import pytest

import shmesh
from conftest import inputs, x_of

if not os.environ.get("SHMESH_DEVICE", "").endswith("libshmesh-device-fake.so"):
    pytest.skip("the fake GPU runtime is not loaded (SHMESH_DEVICE)", allow_module_level=True)


class Producer:
    """Another library's device tensor: DLPack only (its module has no
    from_dlpack, so results come back as shmesh.DeviceArray)."""

    def __init__(self, inner):
        self.inner = inner

    def __dlpack__(self, stream=None):
        return self.inner.__dlpack__(stream)

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


def test_device_in_device_out(mesh, rank, world):
    xs = inputs(world, x_of)
    d = shmesh.device_array(xs[rank])
    assert d.__dlpack_device__() == (2, 0)
    r = shmesh.psum(d, "i", mesh=mesh)
    assert isinstance(r, shmesh.DeviceArray) and r.__dlpack_device__() == (2, 0)
    np.testing.assert_array_equal(r.numpy(), np.sum(xs, axis=0).astype(np.float32))
    g = shmesh.all_gather(Producer(d), "i", mesh=mesh, tiled=True)
    np.testing.assert_array_equal(g.numpy(), np.concatenate(xs))
    s = shmesh.psum_scatter(shmesh.device_array(np.concatenate(xs)), "i", mesh=mesh,
                            tiled=True)
    np.testing.assert_array_equal(s.numpy(), xs[rank] * world)
    b = shmesh.pbroadcast(d, "i", world - 1, mesh=mesh)
    np.testing.assert_array_equal(b.numpy(), xs[world - 1])
    # a result exported again (DLPack) goes back in
    np.testing.assert_array_equal(shmesh.pmax(r, "i", mesh=mesh).numpy(), r.numpy())


def test_device_dtypes(mesh, rank, world):
    m = shmesh.pmean(shmesh.device_array(np.arange(3, dtype=np.int64) * (rank + 1)), "i",
                     mesh=mesh)
    assert m.dtype == np.float64
    np.testing.assert_allclose(m.numpy(), np.arange(3) * (world + 1) / 2)
    b = shmesh.psum(shmesh.device_array(np.array([True, rank == 0])), "i", mesh=mesh)
    assert b.dtype == np.int32 and b.numpy().tolist() == [world, 1]


def test_device_refusals(mesh):
    d = shmesh.device_array(np.ones(4, np.float32))
    with pytest.raises(shmesh.InvalidArgument) as e:
        shmesh.psum([d], "i", mesh=mesh)  # in a pytree
    assert "alone" in str(e.value)
    with pytest.raises(shmesh.InvalidArgument) as e:
        shmesh.psum(Producer(shmesh.device_array(np.ones(2, np.complex64)
                                                 .view(np.float32))), "i", mesh=mesh,
                    out=np.zeros(4))
    assert "alone" in str(e.value)
