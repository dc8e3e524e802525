"""What the collectives take and give: Python scalars and 0-d arrays,
pytrees, every dtype shmesh has, non-contiguous and byte-swapped inputs."""
import collections

import numpy as np
import pytest

import shmesh
from conftest import inputs

eq = np.testing.assert_array_equal


def check(got, want):
    assert isinstance(got, np.ndarray), type(got)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    eq(got, want)


# ---- scalars ------------------------------------------------------------------------

def test_scalars_stay_scalars(mesh, rank, world):
    """A 0-d input (a numpy scalar, a Python number) gives a 0-d result, as
    in JAX; np.ascontiguousarray once made them 1-d ([x])."""
    s = world * (world - 1) // 2
    check(shmesh.psum(np.float32(rank), "i", mesh=mesh), np.array(s, np.float32))
    check(shmesh.psum(np.array(rank, np.int32), "i", mesh=mesh), np.array(s, np.int32))
    check(shmesh.pmax(np.int16(rank), "i", mesh=mesh), np.array(world - 1, np.int16))
    check(shmesh.pargmin(np.float64(-rank), "i", mesh=mesh), np.array(world - 1, np.int32))
    check(shmesh.all_gather(np.int32(rank), "i", mesh=mesh), np.arange(world, dtype=np.int32))
    check(shmesh.pbroadcast(np.float64(rank), "i", 0, mesh=mesh), np.array(0.0))
    check(shmesh.ppermute(np.int32(rank), "i", [(j, (j + 1) % world) for j in range(world)],
                          mesh=mesh), np.array((rank - 1) % world, np.int32))


def test_python_scalars(mesh, rank, world):
    s = world * (world - 1) // 2
    check(shmesh.psum(3, "i", mesh=mesh), np.array(3 * world))  # int64, as np.asarray(3)
    check(shmesh.psum(2.5, "i", mesh=mesh), np.array(2.5 * world))
    check(shmesh.psum(True, "i", mesh=mesh), np.array(world, np.int32))
    check(shmesh.psum(rank, "i", mesh=mesh), np.array(s))
    check(shmesh.pmean(rank, "i", mesh=mesh), np.array(s / world))  # int64 -> float64


# ---- pytrees ------------------------------------------------------------------------

Pair = collections.namedtuple("Pair", "a b")


def test_pytrees(mesh, rank, world):
    def tree(r):
        return {"w": np.arange(6, dtype=np.float32).reshape(2, 3) * r,
                "layers": [np.int32(r), (np.arange(3, dtype=np.int64) + r, [np.float64(-r)])],
                "pair": Pair(np.full(2, r, np.int16), np.bool_(r % 2))}

    trees = [tree(r) for r in range(world)]
    got = shmesh.psum(tree(rank), "i", mesh=mesh)
    assert isinstance(got, dict) and set(got) == {"w", "layers", "pair"}
    assert isinstance(got["layers"], list) and isinstance(got["layers"][1], tuple)
    assert isinstance(got["layers"][1][1], list)
    assert isinstance(got["pair"], Pair)
    check(got["w"], np.sum([t["w"] for t in trees], axis=0).astype(np.float32))
    check(got["layers"][0], np.array(sum(range(world)), np.int32))
    check(got["layers"][1][0], np.sum([t["layers"][1][0] for t in trees], axis=0))
    check(got["layers"][1][1][0], np.array(-float(sum(range(world)))))
    check(got["pair"].a, np.full(2, sum(range(world)), np.int16))
    check(got["pair"].b, np.array(sum(r % 2 for r in range(world)), np.int32))

    # other collectives map over leaves too
    g = shmesh.all_gather([np.int32(rank), (np.float32(2 * rank),)], "i", mesh=mesh)
    check(g[0], np.arange(world, dtype=np.int32))
    check(g[1][0], 2 * np.arange(world, dtype=np.float32))
    b = shmesh.pbroadcast({"k": [np.int8(rank)]}, "i", world - 1, mesh=mesh)
    check(b["k"][0], np.array(world - 1, np.int8))
    m = shmesh.pmean((np.float32(rank), np.int32(rank)), "i", mesh=mesh)
    assert isinstance(m, tuple) and m[0].dtype == np.float32 and m[1].dtype == np.float32
    assert shmesh.psum([], "i", mesh=mesh) == []
    assert shmesh.psum({}, "i", mesh=mesh) == {}


# ---- dtypes -------------------------------------------------------------------------

DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
          np.uint64, np.float16, np.float32, np.float64]


def vals(r, dt):
    v = (np.arange(8) * (r + 1) + r) % 5
    return (v % 2).astype(dt) if dt == np.bool_ else v.astype(dt)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
def test_dtypes(mesh, rank, world, dt):
    xs = inputs(world, lambda r: vals(r, dt))
    want_sum = np.sum(xs, axis=0, dtype=np.int32 if dt == np.bool_ else dt)
    check(shmesh.psum(xs[rank], "i", mesh=mesh), want_sum)
    check(shmesh.pmax(xs[rank], "i", mesh=mesh), np.max(xs, axis=0))
    check(shmesh.pmin(xs[rank], "i", mesh=mesh), np.min(xs, axis=0))
    check(shmesh.pargmax(xs[rank], "i", mesh=mesh), np.argmax(xs, axis=0).astype(np.int32))
    check(shmesh.all_gather(xs[rank], "i", mesh=mesh), np.stack(xs))
    check(shmesh.pbroadcast(xs[rank], "i", 0, mesh=mesh), xs[0])
    mean = shmesh.pmean(xs[rank], "i", mesh=mesh)
    if np.issubdtype(dt, np.floating):
        want = np.dtype(dt)
    else:  # JAX: float32 for 8-, 16- and 32-bit integers and bool, float64 for 64-bit
        want = np.dtype(np.float64 if np.dtype(dt).itemsize == 8 else np.float32)
    assert mean.dtype == want
    np.testing.assert_allclose(mean.astype(np.float64),
                               np.sum(xs, axis=0, dtype=np.float64) / world, rtol=1e-3)


def test_bool_psum_is_int32(mesh, rank, world):
    got = shmesh.psum(np.ones(3, bool), "i", mesh=mesh)
    check(got, np.full(3, world, np.int32))


def test_integers_wrap(mesh, world):
    check(shmesh.psum(np.full(2, 200, np.uint8), "i", mesh=mesh),
          np.full(2, 200 * world % 256, np.uint8))


def test_byte_swapped_input(mesh, rank, world):
    x = np.arange(4, dtype=">i4") + rank
    got = shmesh.psum(x, "i", mesh=mesh)
    check(got, np.arange(4, dtype=np.int32) * world + sum(range(world)))  # native order


def test_bfloat16(mesh, rank, world, monkeypatch):
    try:
        import ml_dtypes
    except ImportError:
        ml_dtypes = None
    if ml_dtypes is not None:
        bf = np.dtype(ml_dtypes.bfloat16)
        x = np.arange(4).astype(bf) + bf.type(rank)
        got = shmesh.psum(x, "i", mesh=mesh)
        assert got.dtype == bf
        eq(got.astype(np.float32), np.arange(4, dtype=np.float32) * world + sum(range(world)))
        # without ml_dtypes known to shmesh, bfloat16 is refused, saying why
        monkeypatch.delitem(shmesh._CODES, bf)
        x_bf = x
    else:
        x_bf = None
    if x_bf is not None:
        with pytest.raises(shmesh.InvalidArgument, match="ml_dtypes"):
            shmesh.psum(x_bf, "i", mesh=mesh)
    with pytest.raises(shmesh.InvalidArgument, match="ml_dtypes"):
        shmesh.alloc(4, "bfloat16")


def test_unsupported_dtype(mesh):
    for x in (np.zeros(2, np.complex64), np.array(["a"]), np.zeros(2, object)):
        with pytest.raises(shmesh.InvalidArgument, match="not one shmesh has"):
            shmesh.psum(x, "i", mesh=mesh)


# ---- layouts: copied, not refused ---------------------------------------------------------

def test_non_contiguous_inputs(mesh, rank, world):
    def base(r):
        return (np.arange(24, dtype=np.int32).reshape(4, 6) * (r + 1))

    xs = inputs(world, base)
    tot = np.sum(xs, axis=0, dtype=np.int32)
    b = base(rank)
    for view, f in [(b[:, ::2], lambda a: a[:, ::2]), (b.T, lambda a: a.T),
                    (b[1:3, 2:5], lambda a: a[1:3, 2:5]), (np.asfortranarray(b), lambda a: a),
                    (b[::-1], lambda a: a[::-1]), (b[:, 1], lambda a: a[:, 1])]:
        assert not view.flags.c_contiguous or view is b
        check(shmesh.psum(view, "i", mesh=mesh), np.ascontiguousarray(f(tot)))
        check(shmesh.all_gather(view, "i", mesh=mesh), np.stack([f(x) for x in xs]))
    assert (b == base(rank)).all(), "the input was changed"


def test_lists_are_leaves_of_a_pytree(mesh, world):
    # a list is a pytree (as in JAX): its numbers are reduced one by one
    got = shmesh.psum([1, 2.0], "i", mesh=mesh)
    assert isinstance(got, list)
    check(got[0], np.array(world))
    check(got[1], np.array(2.0 * world))
