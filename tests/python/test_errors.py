"""Argument errors: shmesh.InvalidArgument (also a ValueError) with the
library's (or the binding's) sentence, raised on every rank alike, and the
context still usable after.  Errors that poison the job (Mismatch,
PeerDead, Timeout, Aborted) are in test_jobs.py, each in a job of its own."""
import numpy as np
import pytest

import shmesh


def invalid(match):
    return pytest.raises(shmesh.InvalidArgument, match=match)


def test_classes():
    assert issubclass(shmesh.InvalidArgument, ValueError)
    assert issubclass(shmesh.Timeout, TimeoutError)
    assert issubclass(shmesh.OutOfMemory, MemoryError)
    assert issubclass(shmesh.SystemFailure, OSError)
    for c in (shmesh.InvalidArgument, shmesh.PeerDead, shmesh.Aborted, shmesh.Timeout,
              shmesh.Mismatch, shmesh.OutOfMemory, shmesh.SystemFailure, shmesh.BadSegment):
        assert issubclass(c, shmesh.Error)


def test_unknown_axis(mesh):
    with invalid("nope") as e:
        shmesh.psum(np.ones(2), "nope", mesh=mesh)
    assert isinstance(e.value, ValueError) and e.value.code == -1
    with invalid("nope"):
        shmesh.axis_index("nope", mesh=mesh)
    with invalid("nope"):
        shmesh.axis_size(("i", "nope"), mesh=mesh)
    with invalid("nope"):
        shmesh.all_gather(np.ones(2), "nope", mesh=mesh)


def test_bad_axis_names(mesh):
    with invalid("axis_name"):
        shmesh.psum(np.ones(2), 3, mesh=mesh)
    with invalid("no axis"):
        shmesh.psum(np.ones(2), (), mesh=mesh)
    with invalid("i"):  # repeated
        shmesh.psum(np.ones(2), ("i", "i"), mesh=mesh)


def test_binding_errors_name_the_rank(mesh, rank):
    """The binding's own refusals are worded as the library's: the rank first."""
    with invalid(r"^rank %d: psum: axis_name must be" % rank):
        shmesh.psum(np.ones(2), 3, mesh=mesh)
    with invalid(r"^rank %d: ppermute: perm" % rank):
        shmesh.ppermute(np.ones(2), "i", perm=[1, 2], mesh=mesh)
    with invalid(r"^rank %d: ppermute: perm %d is out of range" % (rank, -2 ** 33)):
        shmesh.ppermute(np.ones(2), "i", perm=[(0, -2 ** 33)], mesh=mesh)
    # ctypes would truncate these silently (2**32 + k becomes k): refused instead
    with invalid(r"^rank %d: psum: axis_index_groups entry %d is out of range" % (rank, 2 ** 32)):
        shmesh.psum(np.ones(2), "i", axis_index_groups=[[2 ** 32]], mesh=mesh)
    with invalid(r"^rank %d: Mesh: device id %d is out of range" % (rank, 2 ** 32 + rank)):
        shmesh.Mesh(np.array([2 ** 32 + rank]), ("z",))
    s = shmesh.NamedSharding(mesh, shmesh.P())
    with invalid(r"dimension %d is out of range" % (2 ** 64 + 2)):
        s.shard_shape((2 ** 64 + 2,))
    a = shmesh.make_array_from_callback((2,), s, lambda i: np.zeros(2)[i])
    with invalid(r"^rank %d: gather: root %d is out of range" % (rank, 2 ** 32)):
        a.gather(root=2 ** 32)
    with invalid(r"^rank %d: device_put: root %d is out of range" % (rank, 2 ** 32)):
        shmesh.device_put(np.zeros(2), s, root=2 ** 32)
    with invalid(r"^rank %d: pbroadcast: source %d is out of range" % (rank, 2 ** 40)):
        shmesh.pbroadcast(np.ones(2), "i", 2 ** 40, mesh=mesh)


def test_bad_shapes(mesh, world):
    with invalid(r"psum_scatter|scatter|%d" % world):
        shmesh.psum_scatter(np.ones((world + 1, 2)), "i", mesh=mesh)
    with invalid(r"divisible|%d" % world):
        shmesh.psum_scatter(np.ones((2 * world + 1, 2)), "i", tiled=True, mesh=mesh) \
            if world > 1 else shmesh.psum_scatter(np.ones((2, 2)), "i", mesh=mesh)
    with invalid("all_to_all"):
        shmesh.all_to_all(np.ones((world + 1, 2)), "i", 0, 1, mesh=mesh)
    with invalid("out of range"):
        shmesh.all_gather(np.ones((2, 2)), "i", axis=3, mesh=mesh)
    with invalid("out of range"):
        shmesh.all_gather(np.ones((2, 2)), "i", axis=2, tiled=True, mesh=mesh)
    with invalid("scatter_dimension"):
        shmesh.psum_scatter(np.ones((world, 2)), "i", scatter_dimension=-3, mesh=mesh)
    with invalid("split_axis"):
        shmesh.all_to_all(np.ones((world, 2)), "i", 2, 0, mesh=mesh)
    with invalid("pswapaxes|axis"):
        shmesh.pswapaxes(np.ones((world + 1, 2)), "i", 0, mesh=mesh)
    with invalid("at most 8"):
        shmesh.psum(np.ones((1,) * 9), "i", mesh=mesh)


def test_bad_perms(mesh, world):
    with invalid("ppermute|destination|source"):
        shmesh.ppermute(np.ones(2), "i", [(0, 0), (0, 0)], mesh=mesh)
    with invalid("perm"):
        shmesh.ppermute(np.ones(2), "i", [0, 1], mesh=mesh)
    # too long or too short: the C call reads one entry per device, so the
    # binding checks the length (a longer list was once taken, a shorter one
    # read past its end)
    with invalid("perm has %d entries" % (world + 1)):
        shmesh.pshuffle(np.ones(2), "i", list(range(world)) + [0], mesh=mesh)
    with invalid("perm has %d entries" % (world - 1)):
        shmesh.pshuffle(np.ones(2), "i", list(range(world))[1:], mesh=mesh)
    with invalid("pshuffle|perm"):
        shmesh.pshuffle(np.ones(2), "i", [0, 0] if world == 2 else [world], mesh=mesh)
    with invalid("perm"):
        shmesh.pshuffle(np.ones(2), "i", ["a"], mesh=mesh)
    with invalid("pbroadcast|source"):
        shmesh.pbroadcast(np.ones(2), "i", world + 3, mesh=mesh)


def test_bad_groups(mesh, world):
    with invalid("axis_index_groups|group|index"):
        shmesh.psum(np.ones(2), "i", axis_index_groups=[[0, world]], mesh=mesh)
    with invalid("axis_index_groups"):
        shmesh.psum(np.ones(2), "i", axis_index_groups=[0], mesh=mesh)


def test_pargmax_needs_one_axis(mesh2):
    with invalid("one axis|axis"):
        shmesh.pargmax(np.ones(2), ("x", "y"), mesh=mesh2)


def test_bad_meshes(world):
    with invalid("axis names"):
        shmesh.Mesh(np.arange(world), ("a", "b"))
    with invalid("integers"):
        shmesh.Mesh(np.arange(world, dtype=float), ("a",))
    with invalid("shmesh.Mesh"):
        shmesh.psum(np.ones(2), "i", mesh="not a mesh")
    m = shmesh.Mesh(np.arange(world), ("z",))
    m.close()
    with invalid("destroyed"):
        shmesh.psum(np.ones(2), "z", mesh=m)


def test_no_mesh_pushed():
    with invalid(r"mesh|z"):
        shmesh.psum(np.ones(2), "z")


def test_still_usable_after_errors(mesh, world):
    np.testing.assert_array_equal(shmesh.psum(np.ones(3, np.int32), "i", mesh=mesh),
                                  np.full(3, world, np.int32))
