"""Every collective of the binding against numpy: each rank computes every
rank's input from the rank number and so the exact expected result."""
import os

import numpy as np
import pytest

import shmesh
from conftest import check, inputs, x_of

eq = np.testing.assert_array_equal


# ---- the job --------------------------------------------------------------------

def test_rank_and_world_size(rank, world):
    assert 0 <= rank < world
    env = os.environ  # shmesh-run's, or under mpirun Open MPI's (docs/multinode.md)
    assert world == int(env.get("SHMESH_WORLD_SIZE", env.get("OMPI_COMM_WORLD_SIZE", "1")))
    assert rank == int(env.get("SHMESH_RANK", env.get("OMPI_COMM_WORLD_RANK", "0")))
    assert shmesh.initialized()
    assert shmesh.device_count() == world


def test_barrier():
    for _ in range(3):
        assert shmesh.barrier() is None


def test_axis_index_and_size(mesh, rank, world):
    assert shmesh.axis_index("i", mesh=mesh) == rank
    assert shmesh.axis_index("i", mesh=mesh).dtype == np.int32
    assert shmesh.axis_size("i", mesh=mesh) == world


def test_axis_index_reversed_devices(rank, world):
    m = shmesh.Mesh(np.arange(world)[::-1], "i")
    assert shmesh.axis_index("i", mesh=m) == world - 1 - rank
    # the group order follows the mesh: all_gather lists ranks backwards
    check(shmesh.all_gather(np.int32(rank), "i", mesh=m),
          np.arange(world, dtype=np.int32)[::-1])
    m.close()


# ---- reductions -------------------------------------------------------------------

def test_psum(mesh, rank, world):
    xs = inputs(world, x_of)
    check(shmesh.psum(x_of(rank), "i", mesh=mesh), np.sum(xs, axis=0).astype(np.float32))


def test_pmean(mesh, rank, world):
    xs = inputs(world, x_of)
    got = shmesh.pmean(x_of(rank), "i", mesh=mesh)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.mean(xs, axis=0), rtol=1e-6)


def test_pmax_pmin(mesh, rank, world):
    xs = inputs(world, lambda r: x_of(r, (3, 4), np.int32))
    check(shmesh.pmax(xs[rank], "i", mesh=mesh), np.max(xs, axis=0))
    check(shmesh.pmin(xs[rank], "i", mesh=mesh), np.min(xs, axis=0))


def test_pargmax_pargmin(mesh, rank, world):
    # ties broken by the smallest index, as np.argmax does
    xs = inputs(world, lambda r: x_of(r, (3, 4), np.float64) % 3)
    check(shmesh.pargmax(xs[rank], "i", mesh=mesh), np.argmax(xs, axis=0).astype(np.int32))
    check(shmesh.pargmin(xs[rank], "i", mesh=mesh), np.argmin(xs, axis=0).astype(np.int32))


# ---- all_gather, psum_scatter, all_to_all, pswapaxes -------------------------------

@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_all_gather(mesh, rank, world, axis):
    xs = inputs(world, x_of)
    check(shmesh.all_gather(xs[rank], "i", axis=axis, mesh=mesh), np.stack(xs, axis=axis))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_all_gather_tiled(mesh, rank, world, axis):
    xs = inputs(world, x_of)
    check(shmesh.all_gather(xs[rank], "i", axis=axis, tiled=True, mesh=mesh),
          np.concatenate(xs, axis=axis))


@pytest.mark.parametrize("dim", [0, 1])
def test_psum_scatter(mesh, rank, world, dim):
    shape = (world, 3) if dim == 0 else (3, world)
    xs = inputs(world, lambda r: x_of(r, shape, np.int32))
    total = np.sum(xs, axis=0, dtype=np.int32)
    check(shmesh.psum_scatter(xs[rank], "i", scatter_dimension=dim, mesh=mesh),
          np.take(total, rank, axis=dim))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_psum_scatter_tiled(mesh, rank, world, dim):
    shape = (2 * world, 3) if dim == 0 else (3, 2 * world)
    xs = inputs(world, lambda r: x_of(r, shape, np.int32))
    total = np.sum(xs, axis=0, dtype=np.int32)
    want = np.split(total, world, axis=dim)[rank]
    check(shmesh.psum_scatter(xs[rank], "i", scatter_dimension=dim, tiled=True, mesh=mesh),
          want)


def a2a_untiled(xs, rank, split, concat):
    return np.stack([np.take(x, rank, axis=split) for x in xs], axis=concat)


def a2a_tiled(xs, rank, world, split, concat):
    return np.concatenate([np.split(x, world, axis=split)[rank] for x in xs], axis=concat)


@pytest.mark.parametrize("split,concat", [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (0, 2)])
def test_all_to_all(mesh, rank, world, split, concat):
    shape = [2, 3, 2]
    shape[split] = world
    xs = inputs(world, lambda r: x_of(r, tuple(shape)))
    check(shmesh.all_to_all(xs[rank], "i", split, concat, mesh=mesh),
          a2a_untiled(xs, rank, split, concat))


@pytest.mark.parametrize("split,concat", [(0, 0), (0, 1), (1, 0), (1, 1), (2, 1)])
def test_all_to_all_tiled(mesh, rank, world, split, concat):
    shape = [2, 3, 2]
    shape[split] = 2 * world
    xs = inputs(world, lambda r: x_of(r, tuple(shape), np.int64))
    check(shmesh.all_to_all(xs[rank], "i", split, concat, tiled=True, mesh=mesh),
          a2a_tiled(xs, rank, world, split, concat))


@pytest.mark.parametrize("axis", [0, 1])
def test_pswapaxes(mesh, rank, world, axis):
    shape = [3, 3]
    shape[axis] = world
    xs = inputs(world, lambda r: x_of(r, tuple(shape)))
    check(shmesh.pswapaxes(xs[rank], "i", axis, mesh=mesh),
          a2a_untiled(xs, rank, axis, axis))


# ---- permutations -------------------------------------------------------------------

def test_ppermute_ring(mesh, rank, world):
    xs = inputs(world, x_of)
    perm = [(j, (j + 1) % world) for j in range(world)]
    check(shmesh.ppermute(xs[rank], "i", perm, mesh=mesh), xs[(rank - 1) % world])


def test_ppermute_partial(mesh, rank, world):
    # one pair: the destination gets the source's input, every other rank zeros
    xs = inputs(world, x_of)
    got = shmesh.ppermute(xs[rank], "i", [(0, world - 1)], mesh=mesh)
    check(got, xs[0] if rank == world - 1 else np.zeros_like(xs[0]))


def test_pshuffle(mesh, rank, world):
    xs = inputs(world, x_of)
    perm = [(2 * j + 1) % world for j in range(world)]
    if sorted(perm) != list(range(world)):  # a world where 2j+1 is no permutation
        perm = list(range(world))[::-1]
    check(shmesh.pshuffle(xs[rank], "i", perm, mesh=mesh), xs[perm[rank]])


@pytest.mark.parametrize("source", [0, -1])
def test_pbroadcast(mesh, rank, world, source):
    src = source % world
    xs = inputs(world, x_of)
    check(shmesh.pbroadcast(xs[rank], "i", src, mesh=mesh), xs[src])


# ---- ragged_all_to_all ---------------------------------------------------------------

def test_ragged_all_to_all(mesh, rank, world):
    """Rank r sends s(r, j) = 1 + (r + 2j) % 3 rows to rank j, which stacks
    what it receives in sender order (offsets chosen by the senders)."""
    def s(r, j):
        return 1 + (r + 2 * j) % 3

    N = M = 3 * world

    def operand(r):
        return (100 * r + np.arange(N * 2).reshape(N, 2)).astype(np.int32)

    in_off = np.cumsum([0] + [s(rank, j) for j in range(world)])[:-1]
    send = [s(rank, j) for j in range(world)]
    out_off = [sum(s(q, j) for q in range(rank)) for j in range(world)]
    recv = [s(j, rank) for j in range(world)]
    output = np.full((M, 2), -1, np.int32)
    got = shmesh.ragged_all_to_all(operand(rank), output, np.asarray(in_off, np.int32),
                                   np.asarray(send, np.int32), np.asarray(out_off, np.int32),
                                   np.asarray(recv, np.int32), axis_name="i", mesh=mesh)
    want = output.copy()
    row = 0
    for q in range(world):  # q's slice for this rank: its rows after those for ranks < rank
        start = sum(s(q, j) for j in range(rank))
        want[row:row + s(q, rank)] = operand(q)[start:start + s(q, rank)]
        row += s(q, rank)
    check(got, want)
    assert (output == -1).all(), "the output argument was changed"


def test_ragged_bad_slice_is_invalid_everywhere_and_recoverable(mesh, rank, world):
    # every rank sends one row too many to rank 0: refused on every rank
    send = np.ones(world, np.int64)
    send[0] = 2
    with pytest.raises(shmesh.InvalidArgument):
        shmesh.ragged_all_to_all(np.zeros((world, 1)), np.zeros((world, 1)),
                                 np.arange(world, dtype=np.int64), send,
                                 np.full(world, rank, np.int64), np.ones(world, np.int64),
                                 axis_name="i", mesh=mesh)
    # the context is still usable
    check(shmesh.psum(np.int32(1), "i", mesh=mesh), np.int32(world))


# ---- meshes: with, mesh=, several axes, groups -----------------------------------------

def test_with_mesh(mesh, mesh2, rank, world):
    xs = inputs(world, x_of)
    with mesh as m:
        assert m is mesh
        check(shmesh.psum(xs[rank], "i"), np.sum(xs, axis=0).astype(np.float32))
        assert shmesh.axis_index("i") == rank
        with mesh2:  # the innermost mesh is the one used
            assert shmesh.axis_size("x") == mesh2.shape["x"]
            with pytest.raises(shmesh.InvalidArgument, match="i"):
                shmesh.axis_size("i")
        check(shmesh.all_gather(np.int32(rank), "i"), np.arange(world, dtype=np.int32))
    # an explicit mesh= wins over the pushed one
    with mesh2:
        assert shmesh.axis_size("i", mesh=mesh) == world


def test_mesh_properties(mesh2, world):
    a, b = mesh2.devices.shape
    assert mesh2.shape == {"x": a, "y": b}
    assert mesh2.size == world
    assert "'x': %d" % a in repr(mesh2)


def test_several_axes(mesh2, rank, world):
    a, b = mesh2.devices.shape
    x, y = divmod(rank, b)
    assert (shmesh.axis_index("x", mesh=mesh2), shmesh.axis_index("y", mesh=mesh2)) == (x, y)
    assert shmesh.axis_index(("x", "y"), mesh=mesh2) == rank
    assert shmesh.axis_index(("y", "x"), mesh=mesh2) == y * a + x
    assert shmesh.axis_size(("x", "y"), mesh=mesh2) == world
    xs = inputs(world, x_of)
    grid = np.asarray(xs).reshape((a, b) + xs[0].shape)
    check(shmesh.psum(xs[rank], ("x", "y"), mesh=mesh2), np.sum(xs, axis=0).astype(np.float32))
    check(shmesh.psum(xs[rank], "x", mesh=mesh2), grid[:, y].sum(axis=0).astype(np.float32))
    check(shmesh.psum(xs[rank], ["y"], mesh=mesh2), grid[x].sum(axis=0).astype(np.float32))
    check(shmesh.pmax(xs[rank], ("y", "x"), mesh=mesh2), np.max(xs, axis=0))
    check(shmesh.all_gather(xs[rank], ("x", "y"), mesh=mesh2), np.stack(xs))
    # ("y", "x"): row-major over y then x
    order = [xx * b + yy for yy in range(b) for xx in range(a)]
    check(shmesh.all_gather(xs[rank], ("y", "x"), mesh=mesh2), np.stack([xs[q] for q in order]))
    check(shmesh.all_gather(xs[rank], "x", axis=1, tiled=True, mesh=mesh2),
          np.concatenate(list(grid[:, y]), axis=1))


def pair_groups(world):
    """[[1, 0], [3, 2], ...] (each pair backwards); groups of one (backwards)
    for an odd world size (equal sizes, as all_gather needs)."""
    if world % 2:
        return [[k] for k in reversed(range(world))]
    return [[2 * k + 1, 2 * k] for k in range(world // 2)]


def test_groups_psum_all_gather(mesh, rank, world):
    groups = pair_groups(world)
    g = next(g for g in groups if rank in g)
    xs = inputs(world, x_of)
    check(shmesh.psum(xs[rank], "i", axis_index_groups=groups, mesh=mesh),
          np.sum([xs[q] for q in g], axis=0).astype(np.float32))
    check(shmesh.all_gather(xs[rank], "i", axis_index_groups=groups, mesh=mesh),
          np.stack([xs[q] for q in g]))
    check(shmesh.all_gather(xs[rank], "i", axis_index_groups=groups, axis=1, tiled=True,
                            mesh=mesh),
          np.concatenate([xs[q] for q in g], axis=1))


def test_groups_psum_scatter_all_to_all(mesh, rank, world):
    groups = pair_groups(world)
    g = next(g for g in groups if rank in g)
    n = len(g)
    me = g.index(rank)
    xs = inputs(world, lambda r: x_of(r, (2 * n, 3), np.int32))
    total = np.sum([xs[q] for q in g], axis=0, dtype=np.int32)
    check(shmesh.psum_scatter(xs[rank], "i", axis_index_groups=groups, tiled=True, mesh=mesh),
          np.split(total, n)[me])
    check(shmesh.all_to_all(xs[rank], "i", 0, 1, axis_index_groups=groups, tiled=True,
                            mesh=mesh),
          a2a_tiled([xs[q] for q in g], me, n, 0, 1))
    ys = inputs(world, lambda r: x_of(r, (n, 3)))
    check(shmesh.pswapaxes(ys[rank], "i", 0, axis_index_groups=groups, mesh=mesh),
          a2a_untiled([ys[q] for q in g], me, 0, 0))


def test_groups_of_different_sizes(mesh, rank, world):
    """psum, pmax, pmin and pmean take subgroups of different sizes; pmean
    divides by the first subgroup's size (as JAX's psum(1) does)."""
    groups = [list(range(world - 1)), [world - 1]] if world > 1 else [[0]]
    g = next(g for g in groups if rank in g)
    xs = inputs(world, lambda r: x_of(r, (4,), np.int32))
    mine = [xs[q] for q in g]
    check(shmesh.psum(xs[rank], "i", axis_index_groups=groups, mesh=mesh),
          np.sum(mine, axis=0, dtype=np.int32))
    check(shmesh.pmax(xs[rank], "i", axis_index_groups=groups, mesh=mesh), np.max(mine, axis=0))
    check(shmesh.pmin(xs[rank], "i", axis_index_groups=groups, mesh=mesh), np.min(mine, axis=0))
    got = shmesh.pmean(xs[rank], "i", axis_index_groups=groups, mesh=mesh)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.sum(mine, axis=0) / len(groups[0]), rtol=1e-6)


def test_groups_on_two_axes(mesh2, rank, world):
    # groups over the flattened ("x", "y") axis: all ranks backwards in one group
    groups = [list(range(world))[::-1]]
    xs = inputs(world, x_of)
    check(shmesh.all_gather(xs[rank], ("x", "y"), axis_index_groups=groups, mesh=mesh2),
          np.stack(xs[::-1]))


# ---- shared memory --------------------------------------------------------------------

def test_alloc(mesh, rank, world):
    a = shmesh.alloc((3, 4), np.float32)
    assert a.shape == (3, 4) and a.dtype == np.float32 and (a == 0).all()
    a[...] = x_of(rank, (3, 4))
    xs = inputs(world, lambda r: x_of(r, (3, 4)))
    check(shmesh.psum(a, "i", mesh=mesh), np.sum(xs, axis=0).astype(np.float32))
    # an alloc'd array as output: the result written into it, then used again
    b = shmesh.alloc(12, np.int64)
    assert b.shape == (12,)
    b[...] = shmesh.all_gather(np.int64(rank), "i", axis=0, tiled=False, mesh=mesh).sum()
    check(shmesh.pmax(b, "i", mesh=mesh), np.full(12, world * (world - 1) // 2, np.int64))
    check(shmesh.all_gather(a, "i", tiled=True, mesh=mesh), np.concatenate(xs))
    e = shmesh.alloc((0, 3))
    assert e.shape == (0, 3)
    del a, b


def test_empty_arrays(mesh, world):
    x = np.zeros((0, 3), np.float32)
    check(shmesh.psum(x, "i", mesh=mesh), x)
    check(shmesh.all_gather(x, "i", mesh=mesh), np.zeros((world, 0, 3), np.float32))


def test_several_axes_other_collectives(mesh2, rank, world):
    """The rest over ("x", "y") (group index = rank) and over "y" alone."""
    a, b = mesh2.devices.shape
    x, y = divmod(rank, b)
    xy = ("x", "y")
    xs = inputs(world, lambda r: x_of(r, (world, 2), np.int32))
    total = np.sum(xs, axis=0, dtype=np.int32)
    check(shmesh.psum_scatter(xs[rank], xy, mesh=mesh2), total[rank])
    check(shmesh.all_to_all(xs[rank], xy, 0, 0, mesh=mesh2), a2a_untiled(xs, rank, 0, 0))
    ring = [(j, (j + 1) % world) for j in range(world)]
    check(shmesh.ppermute(xs[rank], xy, ring, mesh=mesh2), xs[(rank - 1) % world])
    check(shmesh.pshuffle(xs[rank], xy, list(range(world))[::-1], mesh=mesh2),
          xs[world - 1 - rank])
    check(shmesh.pbroadcast(xs[rank], xy, world - 1, mesh=mesh2), xs[world - 1])
    # along "y": the ranks of this row x
    row = [xs[x * b + j] for j in range(b)]
    check(shmesh.pargmax(xs[rank], "y", mesh=mesh2), np.argmax(row, axis=0).astype(np.int32))
    check(shmesh.pbroadcast(xs[rank], "y", 0, mesh=mesh2), row[0])
    check(shmesh.all_gather(xs[rank], "y", mesh=mesh2), np.stack(row))


# ---- bucketed pytrees ---------------------------------------------------------------

Pair = __import__("collections").namedtuple("Pair", "a b")


def _grad_tree(rank, seed):
    """A gradient-like pytree: many small leaves of several dtypes and shapes
    (scalars, empty ones), a few larger, nested in dicts, lists, tuples and a
    namedtuple; floats with fractions (float sums round differently in
    another order, so equal bits mean the same order)."""
    rng = np.random.default_rng(seed * 1000 + rank)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    return {
        "conv": [{"w": f(8, 3, 3, 3), "b": f(8)} for _ in range(6)],
        "bn": (f(8), f(8), np.float32(rng.standard_normal())),
        "fc": Pair(f(64, 40), rng.standard_normal(40)),  # float64
        "steps": np.int32(rank + 1),
        "mask": rng.standard_normal(7) > 0,  # bool: psum gives int32
        "empty": np.zeros((0, 3), np.float32),
        "big": f(3000),
    }


def _same_tree(got, want):
    """The same structure, and each leaf the same dtype, shape and bits."""
    assert type(got) is type(want)
    if isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            _same_tree(got[k], want[k])
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same_tree(g, w)
    else:
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("op", ["psum", "pmean", "pmax", "pmin"])
def test_bucketed_tree_equals_per_leaf(mesh, rank, op):
    tree = _grad_tree(rank, 1)
    f = getattr(shmesh, op)
    per_leaf = f(tree, "i", mesh=mesh, bucket_bytes=0)
    for b in (64, 1000, shmesh.BUCKET_BYTES, None):
        _same_tree(f(tree, "i", mesh=mesh, bucket_bytes=b), per_leaf)
    # the async form: one Pending for the whole tree, the same bits
    p = getattr(shmesh, op + "_async")(tree, "i", mesh=mesh, bucket_bytes=64)
    _same_tree(p.block_until_ready(), per_leaf)


def test_buckets_pack_leaves(mesh, rank):
    """With the default bucket every float32 leaf is a view of one result;
    with 1 KiB buckets, leaves share results only up to 1 KiB each, and a
    leaf larger than a bucket has a call of its own."""
    tree = _grad_tree(rank, 2)
    out = shmesh.psum(tree, "i", mesh=mesh)
    f32 = [out["conv"][0]["w"], out["conv"][5]["b"], out["bn"][2], out["fc"].a, out["big"]]
    assert all(v.base is not None and v.base is f32[0].base for v in f32)
    assert out["fc"].b.base is not f32[0].base  # float64: a bucket of its own dtype
    small = shmesh.psum(tree, "i", mesh=mesh, bucket_bytes=1024)
    assert small["conv"][0]["w"].base is not small["conv"][1]["w"].base  # 864 B each
    assert small["conv"][0]["w"].base is small["conv"][0]["b"].base
    assert small["big"].base is None  # 12000 B: alone, not packed


def test_bucket_bytes_refused(mesh):
    with pytest.raises(shmesh.InvalidArgument, match="bucket_bytes must be"):
        shmesh.psum([np.float32(1)], "i", mesh=mesh, bucket_bytes=-1)
    with pytest.raises(shmesh.InvalidArgument, match="bucket_bytes must be"):
        shmesh.pmean_async([np.float32(1)], "i", mesh=mesh, bucket_bytes="25M")


# ---- the compiled per-call path (python/shmesh/_ext.c) ----------------------------

def python_path(fn):
    """The package's Python function a compiled callable stands for: where
    the callable sends what its fast path does not take (_collectives._leaf)."""
    return fn.__wrapped__


def test_every_collective_is_compiled():
    """Every collective is a callable of the compiled module (shmesh._ext),
    which the package needs: there is no other path."""
    for name in shmesh._collectives._MESH_OPS:
        op = getattr(shmesh, name)
        if name == "ragged_all_to_all":  # its calls, not the callable, are compiled (_leaf)
            continue
        assert type(op).__name__ == "Collective", name
        assert op.__name__ == name
        assert op.__doc__


_ODD_INPUTS = [
    np.float32(3.5),                                  # 0-d
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.array([True, False, True]),                    # psum: int32
    np.arange(6, dtype=np.int64),                     # pmean: float64
    np.arange(6, dtype=np.int16),                     # pmean: float32
    np.arange(5, dtype=np.float16),
    np.arange(4, dtype=np.uint64),
    np.zeros((0, 3), np.float64),                     # empty
    np.arange(24.0).reshape(2, 3, 4)[:, ::2],          # not contiguous: copied
    np.arange(6, dtype=">i4"),                        # foreign byte order: converted
    np.ones((1,) * 8, np.float32),                    # the most dimensions
]


@pytest.mark.parametrize("op", ["psum", "pmax", "pmin", "pmean"])
@pytest.mark.parametrize("case", range(len(_ODD_INPUTS)))
def test_compiled_equals_python(mesh, rank, op, case):
    """Every input gives the same dtype, shape and bits through the
    compiled callable (shmesh.psum, ...) as through the package's Python
    function it stands for (__wrapped__), with and without mesh=."""
    fn = getattr(shmesh, op)
    py = python_path(fn)
    x = _ODD_INPUTS[case] * (rank + 1) if _ODD_INPUTS[case].dtype != bool else _ODD_INPUTS[case]
    if op == "pmean" and x.dtype == bool:
        pytest.skip("pmean of bool is refused alike (test_errors)")
    with mesh:
        a, b = fn(x, "i"), py(x, "i")
    c = fn(x, "i", mesh=mesh, axis_index_groups=None)
    for got in (a, c):
        assert type(got) is np.ndarray and got.dtype == b.dtype and got.shape == b.shape
        assert got.tobytes() == b.tobytes()


def test_compiled_refuses_alike(mesh):
    """Refusals through the compiled path: the same exception and sentence
    as the Python path's."""
    for bad in [lambda f: f(np.ones(3, np.float32), "nope", mesh=mesh),
                lambda f: f(np.ones(3, np.float32), "i,i", mesh=mesh),
                lambda f: f(np.ones(3, np.float32), "i", mesh=mesh, bogus=1),
                lambda f: f(np.ones(3, np.float32), "i", mesh="not a mesh"),
                lambda f: f(np.ones(3, np.complex64), "i", mesh=mesh)]:
        got = []
        for f in (shmesh.psum, python_path(shmesh.psum)):
            with pytest.raises(Exception) as e:
                bad(f)
            got.append((type(e.value), str(e.value)))
        assert got[0] == got[1]


def _calls_of_moves(world):
    """(op, args, kwargs) of all_gather, psum_scatter and all_to_all, valid
    and not, for test_compiled_moves_equal_python."""
    x = np.arange(2 * world * 3 * world, dtype=np.float32).reshape(2 * world, 3 * world)
    b = np.array([True, False] * world)
    calls = []
    for axis in (0, 1, -1, -2, 2, -3):
        for tiled in (False, True):
            calls.append(("all_gather", (x, "i"), {"axis": axis, "tiled": tiled}))
            calls.append(("psum_scatter", (x, "i"), {"scatter_dimension": axis, "tiled": tiled}))
            calls.append(("all_to_all", (x, "i", axis, 0), {"tiled": tiled}))
            calls.append(("all_to_all", (x, "i", 1, axis), {"tiled": tiled}))
    calls += [("all_gather", (np.float64(2.5), "i"), {}),                # 0-d
              ("all_gather", (np.float64(2.5), "i"), {"tiled": True}),   # refused alike
              ("psum_scatter", (b, "i"), {"tiled": True}),               # bool: int32
              ("psum_scatter", (np.ones(world + 1, np.int32), "i"), {"tiled": True}),
              ("psum_scatter", (np.ones(3, np.int32), "i"), {}),         # dim != group size
              ("all_to_all", (np.ones((world, 2)), "i", 0, 1), {}),
              ("all_gather", (x, "i"), {"axis": 1.0}),                   # not an int
              ("all_gather", (x, "i"), {"tiled": 1}),                    # a truthy int
              ("all_gather", (x[:, ::2], "i"), {"axis": 1})]             # a view
    ring = [(i, (i + 1) % world) for i in range(world)]
    calls += [("pswapaxes", (x, "i", a), {}) for a in (0, 1, -1, 5)]
    calls += [("ppermute", (x, "i", p), {}) for p in (ring, tuple(ring), [list(q) for q in ring],
                                                      ring[:1], [], [(0, world)], [(0, 0, 0)],
                                                      [(0.0, 1)], np.array(ring))]
    calls += [("pshuffle", (x, "i", p), {}) for p in (list(range(world))[::-1],
                                                      tuple(range(world)), [0] * world,
                                                      list(range(world + 1)), [1.5] * world)]
    calls += [("pbroadcast", (b, "i", src), {}) for src in (0, world - 1, world, -1, 2 ** 40)]
    return calls


def test_compiled_moves_equal_python(mesh, world):
    """all_gather, psum_scatter, all_to_all, pswapaxes, ppermute, pshuffle
    and pbroadcast through the compiled callables and through the
    package's Python functions (__wrapped__): the same result (dtype,
    shape, bits) or the same refusal."""
    for name, args, kw in _calls_of_moves(world):
        fn = getattr(shmesh, name)
        got = []
        for f in (fn, python_path(fn)):
            try:
                r = f(*args, mesh=mesh, **kw)
                got.append(("ok", r.dtype, r.shape, r.tobytes()))
            except shmesh.Error as e:
                got.append((type(e), str(e)))
        assert got[0] == got[1], (name, kw, got)


def test_compiled_async_equals_blocking(mesh, world):
    """Every _async form but ragged's is a compiled callable too: its
    Pending gives the blocking call's result (dtype, shape, bits), through
    the fast path and through the general path (__wrapped__) alike; a
    refusal raises the same error at once, and nothing is dispatched (the
    job goes on)."""
    for name in shmesh._collectives._MESH_OPS:
        if name == "ragged_all_to_all":
            continue
        assert type(getattr(shmesh, name + "_async")).__name__ == "Collective", name
    calls = [(n, a, kw) for n, a, kw in _calls_of_moves(world)] + [
        (op, (x,), {}) for op in ("psum", "pmax", "pmin", "pmean") for x in _ODD_INPUTS[:7]]
    for name, args, kw in calls:
        want = None
        try:
            if name in ("psum", "pmax", "pmin", "pmean"):
                r = getattr(shmesh, name)(*args, "i", mesh=mesh, **kw)
            else:
                r = getattr(shmesh, name)(*args, mesh=mesh, **kw)
            want = ("ok", r.dtype, r.shape, r.tobytes())
        except (shmesh.Error, TypeError):
            continue  # (its refusal: below)
        for f in (getattr(shmesh, name + "_async"),
                  python_path(getattr(shmesh, name + "_async"))):
            if name in ("psum", "pmax", "pmin", "pmean"):
                p = f(*args, "i", mesh=mesh, **kw)
            else:
                p = f(*args, mesh=mesh, **kw)
            r = p.block_until_ready()
            assert ("ok", r.dtype, r.shape, r.tobytes()) == want, (name, kw)
            assert p.is_ready() and p.token.is_ready()
    for f in (shmesh.all_gather_async, python_path(shmesh.all_gather_async)):
        with pytest.raises(shmesh.InvalidArgument, match="axis"):
            f(np.ones(3), "i", axis=5, mesh=mesh)
        with pytest.raises(shmesh.InvalidArgument, match="unbound axis name"):
            f(np.ones(3), "nope", mesh=mesh)
    # refused calls dispatched nothing: the job's next call is right
    check(shmesh.psum_async(np.float32(1), "i", mesh=mesh).block_until_ready(),
          np.float32(world))


def test_groups_however_given(mesh, rank, world):
    """axis_index_groups as lists of ints (which the compiled module reads),
    tuples, a numpy array or lists of numpy ints (which the package checks
    and builds), through the callables, their general path and the _async
    forms: the same bits; bad entries refused alike."""
    if world % 2:
        pytest.skip("pairs of ranks")
    pairs = [[i, i + 1] for i in range(0, world, 2)]
    forms = [pairs, tuple(tuple(p) for p in pairs), np.array(pairs),
             [[np.int64(a), b] for a, b in pairs]]
    x = np.arange(2 * world * 3, dtype=np.float32).reshape(2 * world, 3) * (rank + 1)
    calls = [("psum", (x, "i"), {}), ("pmean", (x, "i"), {}), ("pmax", (x, "i"), {}),
             ("all_gather", (x, "i"), {"tiled": True}),
             ("psum_scatter", (x, "i"), {"tiled": True}),
             ("all_to_all", (x, "i", 0, 0), {"tiled": True}), ("pswapaxes", (x[:2], "i", 0), {})]
    for name, args, kw in calls:
        got = set()
        for groups in forms:
            for f in (getattr(shmesh, name), python_path(getattr(shmesh, name))):
                r = f(*args, mesh=mesh, axis_index_groups=groups, **kw)
                got.add((r.dtype.str, r.shape, r.tobytes()))
            r = getattr(shmesh, name + "_async")(*args, mesh=mesh, axis_index_groups=groups,
                                                 **kw).block_until_ready()
            got.add((r.dtype.str, r.shape, r.tobytes()))
        assert len(got) == 1, name
    for bad, words in (([[0, 1.5]], "must be an integer"), ([[0, 0]], "exactly once")):
        for f in (shmesh.psum, python_path(shmesh.psum), shmesh.psum_async):
            with pytest.raises(shmesh.InvalidArgument, match=words):
                f(x, "i", mesh=mesh, axis_index_groups=bad)


def test_out_in_place(mesh, rank, world):
    """out=: the result written into the array given, which is returned,
    through the compiled path and the Python one alike; a wrong one is
    refused the same way by both."""
    xs = inputs(world, x_of)
    for fn in (shmesh.psum, python_path(shmesh.psum)):
        o = np.full((2, 3), -1, np.float32)
        assert fn(xs[rank], "i", mesh=mesh, out=o) is o
        check(o, np.sum(xs, axis=0).astype(np.float32))
    g = np.zeros((world * 2, 3), np.float32)
    assert shmesh.all_gather(xs[rank], "i", mesh=mesh, tiled=True, out=g) is g
    check(g, np.concatenate(xs))
    p = np.zeros((2, 3), np.float32)
    assert shmesh.pbroadcast(xs[rank], "i", 0, mesh=mesh, out=p) is p
    check(p, xs[0])
    bad = [np.zeros((3, 2), np.float32), np.zeros((2, 3), np.float64),
           np.zeros((3, 2), np.float32).T, "not an array"]
    ro = np.zeros((2, 3), np.float32)
    ro.flags.writeable = False
    for o in bad + [ro]:
        got = []
        for fn in (shmesh.psum, python_path(shmesh.psum)):
            with pytest.raises(shmesh.InvalidArgument) as e:
                fn(xs[rank], "i", mesh=mesh, out=o)
            got.append(str(e.value))
        assert got[0] == got[1]
    with pytest.raises(shmesh.InvalidArgument):
        shmesh.psum([xs[rank]], "i", mesh=mesh, out=p)  # one array only


@pytest.mark.parametrize("axis,tiled", [(0, False), (1, False), (-1, False), (0, True),
                                        (1, True), (-1, True)])
def test_bucketed_all_gather_equals_per_leaf(mesh, rank, axis, tiled):
    """all_gather of a pytree in buckets gives each leaf the bytes, shape
    and dtype of one call per leaf (bucket_bytes=0), along any axis, tiled
    or not, with leaves of several dtypes and one larger than a bucket."""
    tree = {"a": x_of(rank, (2, 3)), "b": [x_of(rank, (4, 1), np.int64), x_of(rank, (3, 2))],
            "c": (x_of(rank, (5, 2), np.float64), x_of(rank, (64, 4)))}
    kw = dict(mesh=mesh, axis=axis, tiled=tiled)
    got = shmesh.all_gather(tree, "i", bucket_bytes=256, **kw)
    want = shmesh.all_gather(tree, "i", bucket_bytes=0, **kw)
    flat_got, flat_want = [got["a"], *got["b"], *got["c"]], [want["a"], *want["b"], *want["c"]]
    for g, w in zip(flat_got, flat_want):
        check(g, w)
        assert g.flags.c_contiguous
