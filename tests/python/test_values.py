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
