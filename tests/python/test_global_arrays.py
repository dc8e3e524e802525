"""PartitionSpec, NamedSharding, make_array_from_callback and GlobalArray
against numpy: every block is checked against the test's own slicing of a
global numpy array (`blocks` below, the rule of docs/arrays.md), on 1, 2
and 4 ranks (one device each).  Every rank runs every test in the same
order; the collective ones (gather, device_put, Mesh) everywhere.  The
single-rank run also replays tests/golden/sharding-101.txt (recorded from
JAX) through golden_sharding.py in jobs of 8 devices."""
import itertools
import os
import subprocess
import sys

import numpy as np
import pytest

import shmesh
from shmesh import P, NamedSharding, PartitionSpec


def blocks(mesh, spec, shape):
    """{device id: tuple of (start, stop)} by docs/arrays.md's rule: a
    dimension split over axes (a, b) is cut into size(a) * size(b) blocks,
    the device at coordinates (i on a, j on b) holding block i * size(b) + j."""
    sizes = mesh.shape
    names = mesh.axis_names
    out = {}
    for coords in itertools.product(*[range(n) for n in mesh.devices.shape]):
        at = dict(zip(names, coords))
        block = []
        for d, n in enumerate(shape):
            e = spec[d] if d < len(spec) else None
            axes = [] if e is None else [e] if isinstance(e, str) else list(e)
            ways, b = 1, 0
            for a in axes:
                ways *= sizes[a]
                b = b * sizes[a] + at[a]
            shard = n // ways
            block.append((b * shard, b * shard + shard))
        out[int(mesh.devices[coords])] = tuple(block)
    return out


def as_ranges(index, shape):
    return tuple(s.indices(n)[:2] for s, n in zip(index, shape))


# (spec, shape) per mesh: 1-D ("i") and 2-D ("x", "y"); shapes divisible by 4
CASES_1D = [
    (P(), (8, 4)),
    (P("i"), (8, 4)),
    (P(None, "i"), (3, 8)),
    (P("i", None), (4, 5, 2)),
    (P(("i",)), (8,)),
    (P("i"), (0, 3)),           # a split dimension of size 0
    (P(None, None, None), (4, 4)),  # entries past the dimensions that split nothing
    (P(), ()),                  # a scalar
]
CASES_2D = [
    (P("x", "y"), (8, 4)),
    (P("y", "x"), (8, 4)),
    (P(("x", "y")), (8, 3)),
    (P(("y", "x"), None), (8, 3)),
    (P(None, ("x", "y")), (2, 8)),
    (P("x"), (4, 6, 2)),        # fewer entries than dimensions
    (P(None, "y"), (3, 4, 2)),
    (P("y", None, "x"), (4, 3, 2)),
    (P(), (5, 7)),              # replicated
]


def cases(request_mesh_name):
    return CASES_1D if request_mesh_name == "mesh" else CASES_2D


def test_partition_spec_repr_and_equality():
    assert repr(P("data", None)) == "PartitionSpec('data', None)"
    assert repr(P(("x", "y"), None)) == "PartitionSpec(('x', 'y'), None)"
    assert repr(P("x")) == "PartitionSpec('x',)"
    assert repr(P()) == "PartitionSpec()"
    assert P is PartitionSpec
    assert P("x", None) == P("x", None) and P("x") != P("y")
    assert tuple(P("a", ["b", "c"])) == ("a", ("b", "c"))


@pytest.mark.parametrize("which", ["mesh", "mesh2"])
def test_shard_shapes_and_indices(which, request):
    mesh = request.getfixturevalue(which)
    for spec, shape in cases(which):
        s = NamedSharding(mesh, spec)
        assert s.mesh is mesh and s.spec == spec
        want = blocks(mesh, spec, shape)
        sshape = s.shard_shape(shape)
        any_block = next(iter(want.values()))
        assert sshape == tuple(b - a for a, b in any_block), (spec, shape)
        imap = s.devices_indices_map(shape)
        assert list(imap) == [int(d) for d in mesh.devices.ravel()]  # mesh order
        g = np.arange(int(np.prod(shape))).reshape(shape)
        for dev, index in imap.items():
            assert len(index) == len(shape)
            assert as_ranges(index, shape) == want[dev], (spec, shape, dev)
            assert g[index].shape == sshape
            for d, sl in enumerate(index):  # JAX's slice(None) where a dimension is whole
                assert (sl == slice(None)) == (sshape[d] == shape[d])
        # replica ids: 0, 1, ... among the holders of each block, in mesh order
        seen = {}
        for dev, r in s.replica_ids(shape).items():
            key = want[dev]
            assert r == seen.get(key, 0)
            seen[key] = r + 1
        full = all(b - a == n for (a, b), n in zip(any_block, shape))
        assert s.is_fully_replicated_for(shape) == full


def test_is_fully_replicated(mesh, mesh2, world):
    assert NamedSharding(mesh, P()).is_fully_replicated
    assert NamedSharding(mesh, P(None, None)).is_fully_replicated
    assert NamedSharding(mesh, P("i")).is_fully_replicated == (world == 1)
    assert NamedSharding(mesh2, P("y")).is_fully_replicated == (mesh2.shape["y"] == 1)
    assert NamedSharding(mesh2, P(("x", "y"))).is_fully_replicated == (world == 1)


DTYPES = [np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_, np.float16]


def global_array(shape, dtype):
    g = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    return (g % 2 == 1) if dtype is np.bool_ else g.astype(dtype)


@pytest.mark.parametrize("which", ["mesh", "mesh2"])
def test_make_array_from_callback(which, request, rank):
    mesh = request.getfixturevalue(which)
    for k, (spec, shape) in enumerate(cases(which)):
        dtype = DTYPES[k % len(DTYPES)]
        g = global_array(shape, dtype)
        s = NamedSharding(mesh, spec)
        asked = []

        def cb(index):
            asked.append(index)
            return g[index]

        a = shmesh.make_array_from_callback(shape, s, cb, dtype=dtype)
        assert isinstance(a, shmesh.GlobalArray)
        assert a.shape == shape and a.dtype == np.dtype(dtype) and a.sharding is s
        imap = s.devices_indices_map(shape)
        shards = a.addressable_shards
        assert [sh.device for sh in shards] == [rank]  # one device per rank
        assert asked == [imap[rank]]
        for sh in shards:
            assert sh.index == imap[sh.device]
            assert sh.data.dtype == np.dtype(dtype)
            np.testing.assert_array_equal(sh.data, g[sh.index])
            assert not sh.data.flags.writeable
        # every device's shard, in mesh order: data only for this rank's
        gs = a.global_shards
        assert [sh.device for sh in gs] == [int(d) for d in mesh.devices.ravel()]
        rids = s.replica_ids(shape)
        assert [sh.replica_id for sh in gs] == [rids[sh.device] for sh in gs]
        for sh in gs:
            assert sh.index == imap[sh.device]
            if sh.device == rank:
                np.testing.assert_array_equal(sh.data, g[sh.index])
            else:
                assert sh.data is None
        assert a.is_fully_replicated == s.is_fully_replicated_for(shape)
        # gather to every rank (np.asarray) and to one root
        np.testing.assert_array_equal(np.asarray(a), g)
        assert np.asarray(a).dtype == np.dtype(dtype)
        got = a.gather(root=0)
        if rank == 0:
            np.testing.assert_array_equal(got, g)
        else:
            assert got is None


@pytest.mark.parametrize("which", ["mesh", "mesh2"])
def test_make_array_from_single_device_arrays(which, request, rank):
    """Every case of the callback test, over the rank's own blocks: the
    array borrows them (its shards are those buffers), and gathers to g."""
    mesh = request.getfixturevalue(which)
    for k, (spec, shape) in enumerate(cases(which)):
        dtype = DTYPES[k % len(DTYPES)]
        g = global_array(shape, dtype)
        s = NamedSharding(mesh, spec)
        imap = s.devices_indices_map(shape)
        blocks = [np.array(g[imap[d]], order="C") for d in mesh.local_devices]
        a = shmesh.make_array_from_single_device_arrays(shape, s, blocks)
        assert a.shape == shape and a.dtype == np.dtype(dtype)
        for sh, b in zip(a.addressable_shards, blocks):
            assert np.shares_memory(sh.data, b) or b.size == 0  # borrowed, not copied
            np.testing.assert_array_equal(sh.data, g[sh.index])
        np.testing.assert_array_equal(np.asarray(a), g)
        # writing into a borrowed block changes the shard (the gather sees it)
        if blocks[0].size and dtype is not np.bool_:
            blocks[0].flat[0] += 1
            assert a.addressable_shards[0].data.flat[0] == blocks[0].flat[0]
            blocks[0].flat[0] -= 1


def test_single_device_arrays_refused(mesh2, rank):
    s = NamedSharding(mesh2, P("x", "y"))
    shape = (4, 6)
    sshape = s.shard_shape(shape)
    ok = np.zeros(sshape, np.float32)
    invalid(lambda: shmesh.make_array_from_single_device_arrays(shape, s, []),
            "0 arrays given", "1 devices")
    invalid(lambda: shmesh.make_array_from_single_device_arrays(shape, s, [ok, ok]),
            "2 arrays given")
    invalid(lambda: shmesh.make_array_from_single_device_arrays(
        shape, s, [np.zeros((sshape[0] + 1, sshape[1]), np.float32)]),
        "device %d's array is float32[%d, %d]" % (rank, sshape[0] + 1, sshape[1]))
    invalid(lambda: shmesh.make_array_from_single_device_arrays(shape, s, [ok], dtype=np.int32),
            "device %d's array is float32" % rank, "int32")
    invalid(lambda: shmesh.make_array_from_single_device_arrays(shape, P("x"), [ok]),
            "NamedSharding")
    # a strided block is copied, and still right
    big = np.zeros((sshape[0], 2 * sshape[1]), np.float32)
    big[:, ::2] = 7
    a = shmesh.make_array_from_single_device_arrays(shape, s, [big[:, ::2]])
    assert not np.shares_memory(a.addressable_shards[0].data, big)
    assert (a.addressable_shards[0].data == 7).all()


def test_dtype_from_the_callback(mesh2):
    g = np.arange(32, dtype=np.int16).reshape(8, 4)
    a = shmesh.make_array_from_callback(g.shape, NamedSharding(mesh2, P("x", "y")),
                                        lambda index: g[index])
    assert a.dtype == np.int16
    np.testing.assert_array_equal(np.asarray(a), g)


def test_device_put_scatter_and_reshard(mesh, mesh2, rank, world):
    g = np.arange(48, dtype=np.float32).reshape(8, 6)
    host = g if rank == 0 else np.zeros_like(g)  # only rank 0's data is read
    a = shmesh.device_put(host, NamedSharding(mesh2, P(("x", "y"))))
    for sh in a.addressable_shards:
        np.testing.assert_array_equal(sh.data, g[sh.index])
    b = shmesh.device_put(a, NamedSharding(mesh, P(None, None)))
    assert b.is_fully_replicated
    np.testing.assert_array_equal(b.addressable_shards[0].data, g)
    c = shmesh.device_put(b, NamedSharding(mesh2, P("y", "x")))
    for sh in c.addressable_shards:
        np.testing.assert_array_equal(sh.data, g[sh.index])
    np.testing.assert_array_equal(np.asarray(c), g)


def test_device_put_donate(mesh, mesh2, rank, world):
    """A donated array is used up; its successor holds the same values; a
    donation is refused while a numpy array still views the shards."""
    g = np.arange(48, dtype=np.float32).reshape(8, 6)
    a = shmesh.make_array_from_callback(g.shape, NamedSharding(mesh2, P("x")),
                                        lambda index: g[index])
    view = a.addressable_shards[0].data[1:]  # a view of a view: still a view
    with pytest.raises(shmesh.InvalidArgument) as e:
        shmesh.device_put(a, NamedSharding(mesh, P(None, None)), donate=True)
    assert "viewed by numpy arrays" in str(e.value)
    np.testing.assert_array_equal(view, a.addressable_shards[0].data[1:])  # untouched
    del view
    b = shmesh.device_put(a, NamedSharding(mesh, P(None, None)), donate=True)
    np.testing.assert_array_equal(b.addressable_shards[0].data, g)
    with pytest.raises(shmesh.InvalidArgument) as e:
        a.addressable_shards
    assert "destroyed" in str(e.value)
    c = shmesh.device_put(b, NamedSharding(mesh2, P("y", "x")), donate=True)
    for sh in c.addressable_shards:
        np.testing.assert_array_equal(sh.data, g[sh.index])


def invalid(f, *words):
    with pytest.raises(shmesh.InvalidArgument) as e:
        f()
    for w in words:
        assert w in str(e.value), str(e.value)
    assert e.value.code == -1
    return str(e.value)


def test_refusals(mesh, mesh2, world, rank):
    invalid(lambda: NamedSharding(mesh, P("nope")), "ValueError", "'nope'")
    invalid(lambda: NamedSharding(mesh2, P("x", "x")), "DuplicateSpecError", "'x'")
    invalid(lambda: NamedSharding(mesh2, P(("y", "x"), "y")), "DuplicateSpecError")
    invalid(lambda: P(3), "PartitionSpec")
    invalid(lambda: NamedSharding(mesh, P("a b")), "axis name")
    s = NamedSharding(mesh, P("i"))
    if world > 1:  # world-wide condition: every rank skips alike
        msg = invalid(lambda: s.shard_shape((world + 1, 2)), "IndivisibleError")
        assert msg.startswith("rank %d: " % rank)
        invalid(lambda: shmesh.make_array_from_callback((world + 1,), s, lambda i: None),
                "IndivisibleError")
        invalid(lambda: NamedSharding(mesh, P(None, "i")).shard_shape((4,)), "IndexError")
    else:
        assert s.shard_shape((3, 2)) == (3, 2)
    invalid(lambda: shmesh.make_array_from_callback((4,), mesh, lambda i: None), "NamedSharding")
    # the callback's block of the wrong shape, and its own exception, come out
    invalid(lambda: shmesh.make_array_from_callback(
        (4 * world,), s, lambda i: np.zeros(5, np.float32), dtype=np.float32), "shape (5,)")

    def boom(index):
        raise KeyError("no block here")

    with pytest.raises(KeyError, match="no block here"):
        shmesh.make_array_from_callback((4 * world,), s, boom, dtype=np.float32)
    invalid(lambda: shmesh.make_array_from_callback((4,), NamedSharding(mesh, P()),
                                                    lambda i: np.zeros(4), dtype=np.complex64),
            "complex64")
    # after the refusals, a good array still works
    g = np.arange(4 * world, dtype=np.float64)
    a = shmesh.make_array_from_callback(g.shape, s, lambda i: g[i])
    np.testing.assert_array_equal(np.asarray(a), g)


def test_closing_the_mesh_frees_its_shardings_and_arrays(world):
    m = shmesh.Mesh(np.arange(world), ("k",))  # collective: every rank makes it
    s = NamedSharding(m, P("k"))
    g = np.arange(2 * world, dtype=np.int32)
    a = shmesh.make_array_from_callback(g.shape, s, lambda i: g[i])
    np.testing.assert_array_equal(np.asarray(a), g)
    m.close()
    invalid(lambda: a.gather(), "destroyed")
    invalid(lambda: a.addressable_shards, "destroyed")
    invalid(lambda: s.shard_shape((4,)), "destroyed")
    invalid(lambda: NamedSharding(m, P()), "destroyed")


def test_array_close_and_garbage(mesh, world):
    s = NamedSharding(mesh, P("i"))
    g = np.arange(3 * world, dtype=np.float32)
    for _ in range(50):  # freed when dropped (the suite would leak else)
        a = shmesh.make_array_from_callback(g.shape, s, lambda i: g[i])
    data = a.addressable_shards[0].data
    del a  # the shard's data keeps its array alive
    np.testing.assert_array_equal(data, g[3 * shmesh.rank():3 * shmesh.rank() + 3])
    b = shmesh.make_array_from_callback(g.shape, s, lambda i: g[i])
    b.close()
    invalid(lambda: np.asarray(b), "destroyed")


HERE = os.path.dirname(os.path.abspath(__file__))
# what the launcher gives a rank: not passed on to the jobs started here
JOB_VARS = ("SHMESH_SEGMENT", "SHMESH_RANK", "SHMESH_WORLD_SIZE", "SHMESH_LOCAL_RANK",
            "SHMESH_LOCAL_DEVICES", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
            "SHMESH_TIMEOUT")


@pytest.mark.skipif(shmesh.world_size() != 1, reason="jobs are started from the single-rank run")
@pytest.mark.parametrize("ranks,devices", [(2, 4), (1, 8)])
def test_golden_sharding_cases(launcher, ranks, devices):
    """The 600 recorded cases on 8 devices (2 ranks of 4, 1 of 8): shard
    shapes, blocks, replica ids and refusals as JAX's, and
    make_array_from_callback and its gather with several devices per rank."""
    e = {k: v for k, v in os.environ.items() if k not in JOB_VARS}
    e["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(shmesh.__file__)))
    e["SHMESH_LIBRARY"] = os.path.abspath(shmesh._lib.lib._name)
    golden = os.path.join(HERE, "..", "golden", "sharding-101.txt")
    cmd = [launcher, "-n", str(ranks), "--devices-per-rank", str(devices), "--timeout", "60",
           "--", sys.executable, os.path.join(HERE, "golden_sharding.py"), golden]
    p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=90, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("golden sharding: 600 cases, 600 passed, 0 failed") == ranks, p.stdout
