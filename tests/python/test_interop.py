"""Other libraries' arrays in the collectives: PyTorch tensors (Debian's
python3-torch, which run.sh installs; skipped, on every rank alike, where
it does not import) and any DLPack producer.  A tensor goes in without a
copy and its result comes back as a tensor sharing the result's memory."""
import numpy as np
import pytest

import shmesh
from conftest import inputs, x_of

torch = pytest.importorskip("torch")


def test_tensor_in_tensor_out(mesh, rank, world):
    xs = inputs(world, x_of)
    t = torch.from_numpy(xs[rank].copy())
    r = shmesh.psum(t, "i", mesh=mesh)
    assert isinstance(r, torch.Tensor) and r.dtype == torch.float32
    np.testing.assert_array_equal(r.numpy(), np.sum(xs, axis=0).astype(np.float32))
    g = shmesh.all_gather(t, "i", mesh=mesh, tiled=True)
    assert isinstance(g, torch.Tensor)
    np.testing.assert_array_equal(g.numpy(), np.concatenate(xs))
    m = shmesh.pmean(torch.arange(4, dtype=torch.int64) * (rank + 1), "i", mesh=mesh)
    assert m.dtype == torch.float64  # int64 means to float64, as for numpy
    np.testing.assert_allclose(m.numpy(), np.arange(4) * (world + 1) / 2)
    ring = [(i, (i + 1) % world) for i in range(world)]
    p = shmesh.ppermute(torch.full((2,), rank, dtype=torch.int32), "i", ring, mesh=mesh)
    assert p.tolist() == [(rank - 1) % world] * 2


def test_bool_and_pytrees(mesh, rank, world):
    """bool tensors (which DLPack does not carry) sum to int32 tensors; a
    pytree may mix tensors and numpy arrays, bucketed or not, and each leaf
    comes back as its kind."""
    tree = {"t": torch.tensor([True, rank == 0]), "n": np.ones(3, np.float32) * rank,
            "l": [torch.ones(2, 2, dtype=torch.float64)]}
    for bucket in (0, shmesh.BUCKET_BYTES):
        r = shmesh.psum(tree, "i", mesh=mesh, bucket_bytes=bucket)
        assert isinstance(r["t"], torch.Tensor) and r["t"].dtype == torch.int32
        assert r["t"].tolist() == [world, 1]
        assert type(r["n"]) is np.ndarray
        np.testing.assert_array_equal(r["n"], np.full(3, world * (world - 1) / 2, np.float32))
        assert isinstance(r["l"][0], torch.Tensor) and r["l"][0].dtype == torch.float64
        np.testing.assert_array_equal(r["l"][0].numpy(), np.full((2, 2), float(world)))


def test_no_copy():
    """A contiguous CPU tensor is handed over as a numpy array on its own
    memory; a result goes back as a tensor on the result's memory."""
    t = torch.arange(8, dtype=torch.float32)
    a, back = shmesh._from_foreign(t, "test")
    assert a.ctypes.data == t.data_ptr()
    out = np.arange(3.0)
    assert back(out).data_ptr() == out.ctypes.data


def test_views_and_refusals(mesh, rank, world):
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    r = shmesh.psum(base[:, ::2], "i", mesh=mesh)  # strided: copied, then summed
    np.testing.assert_array_equal(r.numpy(), base[:, ::2].numpy() * world)
    with pytest.raises(shmesh.InvalidArgument) as e:
        shmesh.psum(torch.ones(2, requires_grad=True), "i", mesh=mesh)
    assert "x.detach()" in str(e.value)


class _Producer:
    """A minimal DLPack producer over a numpy array, on a device it names."""

    def __init__(self, a, device=1):
        self.a, self.device = a, device

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return (self.device, 0)


def test_any_dlpack_producer(mesh, world):
    src = np.arange(4, dtype=np.float32)
    r = shmesh.psum(_Producer(src), "i", mesh=mesh)  # its package has no from_dlpack
    assert type(r) is np.ndarray
    np.testing.assert_array_equal(r, src * world)
    with pytest.raises(shmesh.InvalidArgument) as e:  # kDLCUDA, with no GPU runtime here
        shmesh.psum(_Producer(src, device=2), "i", mesh=mesh)
    assert "no GPU runtime" in str(e.value)
    with pytest.raises(shmesh.InvalidArgument) as e:  # kDLCUDA in a pytree
        shmesh.psum([_Producer(src, device=2)], "i", mesh=mesh)
    assert "device type 2 (CUDA)" in str(e.value)


def test_out_tensor(mesh, world):
    """out= a tensor: written in place, and returned."""
    o = torch.zeros(4)
    r = shmesh.psum(torch.ones(4), "i", mesh=mesh, out=o)
    assert r is o and o.tolist() == [float(world)] * 4


def test_async_forms(mesh, rank, world):
    """The _async forms take tensors too; the Pending's result is a tensor
    on the result's memory, right once the work is done."""
    p = shmesh.psum_async({"t": torch.ones(3) * rank, "n": np.ones(2)}, "i", mesh=mesh)
    r = p.block_until_ready()
    assert isinstance(r["t"], torch.Tensor) and type(r["n"]) is np.ndarray
    assert r["t"].tolist() == [float(world * (world - 1) / 2)] * 3
    g = shmesh.all_gather_async(torch.full((2,), rank), "i", mesh=mesh, tiled=True)
    assert g.block_until_ready().tolist() == [r_ for r_ in range(world) for _ in range(2)]
