"""Fixtures shared by the shmesh binding's tests.

The suite runs under shmesh-run on 1, 2 or 4 ranks: every rank runs the
same tests in the same order, so every collective is called identically
everywhere.  A test may skip only on a condition every rank shares (the
world size), never on one rank alone.  Each rank computes every rank's
input from the rank number (`inputs`), so it knows the exact result."""
import os

import numpy as np
import pytest

import shmesh


def pytest_report_header(config):
    return "shmesh: rank %d of %d, library %s" % (
        shmesh.rank(), shmesh.world_size(), shmesh._lib.lib._name)


@pytest.fixture(scope="session")
def world():
    return shmesh.world_size()


@pytest.fixture(scope="session")
def rank():
    return shmesh.rank()


@pytest.fixture(scope="session")
def mesh(world):
    """A mesh of one axis "i" over every rank, in rank order."""
    return shmesh.Mesh(np.arange(world), ("i",))


def mesh2_shape(world):
    """(2, world / 2) where the world is even, else (1, world)."""
    return (2, world // 2) if world % 2 == 0 else (1, world)


@pytest.fixture(scope="session")
def mesh2(world):
    """A 2-D mesh ("x", "y"): 2x2 on 4 ranks, 2x1 on 2, 1x1 on 1; rank
    r = x * size_y + y."""
    return shmesh.Mesh(np.arange(world).reshape(mesh2_shape(world)), ("x", "y"))


def x_of(r, shape=(2, 3), dtype=np.float32):
    """Rank r's input: small integers (exact in every dtype and any sum order)."""
    n = int(np.prod(shape))
    return ((np.arange(n) * (r + 3) + 5 * r) % 11 - 4).reshape(shape).astype(dtype)


def check(got, want):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)


def inputs(world, f):
    """[f(0), ..., f(world - 1)]: every rank's input, on every rank."""
    return [np.asarray(f(r)) for r in range(world)]


@pytest.fixture(scope="session")
def launcher():
    """shmesh-run: $SHMESH_RUN, else the build tree's beside the library."""
    p = os.environ.get("SHMESH_RUN")
    if not p:
        lib = os.path.abspath(shmesh._lib.lib._name)
        p = os.path.join(os.path.dirname(os.path.dirname(lib)), "launcher", "shmesh-run")
    if not os.access(p, os.X_OK):
        pytest.fail("no shmesh-run at %s (set SHMESH_RUN)" % p)
    return p
