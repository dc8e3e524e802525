"""The examples of JAX's parallel-primitive docstrings, from Python: the
inputs and expected arrays of tests/test_examples.c (run there by
tests/helpers/examples_prog.c).  Device i of the example's pmap is rank i;
each rank checks its own result and the results of all ranks stacked (the
array the docstring prints).  Most examples are for 4 devices and run only
on 4 ranks; ragged_all_to_all's is for an axis of 2 (the "i" axis on 2
ranks, "x" of the 2x2 mesh on 4)."""
import numpy as np
import pytest

import shmesh

needs4 = pytest.mark.skipif(shmesh.world_size() != 4, reason="a 4-device example")


def stacked(out, mesh):
    return shmesh.all_gather(out, "i", mesh=mesh)


def same(got, want, dtype):
    want = np.asarray(want, dtype)
    assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
    np.testing.assert_array_equal(got, want)


def row(rank):
    """Row `rank` of x = np.arange(16).reshape(4, 4)."""
    return np.arange(16, dtype=np.int32).reshape(4, 4)[rank]


@needs4
def test_input_4x4(mesh, rank):
    same(stacked(row(rank), mesh), np.arange(16).reshape(4, 4), np.int32)


@needs4
def test_psum(mesh, rank):
    out = shmesh.psum(np.int32(rank), "i", mesh=mesh)  # x = np.arange(4)
    same(stacked(out, mesh), [6, 6, 6, 6], np.int32)


@needs4
def test_psum_div(mesh, rank):
    x = np.int32(rank)
    y = np.float32(x) / np.float32(shmesh.psum(x, "i", mesh=mesh))
    same(stacked(y, mesh), [0., 0.16666667, 0.33333334, 0.5], np.float32)


@needs4
def test_psum_groups(mesh, rank):
    out = shmesh.psum(np.int32(rank), "i", axis_index_groups=[[0, 1], [2, 3]], mesh=mesh)
    same(stacked(out, mesh), [1, 1, 5, 5], np.int32)


@needs4
def test_psum_2d(mesh, rank):
    out = shmesh.psum(row(rank), "i", mesh=mesh)
    same(stacked(out, mesh), [[24, 28, 32, 36]] * 4, np.int32)


@needs4
def test_psum_2d_groups(mesh, rank):
    out = shmesh.psum(row(rank), "i", axis_index_groups=[[0, 1], [2, 3]], mesh=mesh)
    same(stacked(out, mesh), [[4, 6, 8, 10], [4, 6, 8, 10], [20, 22, 24, 26], [20, 22, 24, 26]],
         np.int32)


@needs4
def test_pmean(mesh, rank):
    out = shmesh.pmean(np.int32(rank), "i", mesh=mesh)
    assert out.dtype == np.float32
    same(stacked(out, mesh), [1.5, 1.5, 1.5, 1.5], np.float32)


@needs4
def test_pmean_div(mesh, rank):
    x = np.int32(rank)
    # JAX promotes int32 / float32 to float32 (numpy, with scalars, to float64)
    y = np.float32(x) / shmesh.pmean(x, "i", mesh=mesh)
    same(stacked(y, mesh), [0., 0.6666667, 1.3333334, 2.], np.float32)


@needs4
def test_all_gather(mesh, rank):
    out = shmesh.all_gather(np.int32(rank), "i", mesh=mesh)
    same(stacked(out, mesh), [[0, 1, 2, 3]] * 4, np.int32)


@needs4
def test_all_gather_groups(mesh, rank):
    out = shmesh.all_gather(row(rank), "i", axis_index_groups=[[0, 2], [3, 1]], mesh=mesh)
    a = [[0, 1, 2, 3], [8, 9, 10, 11]]
    b = [[12, 13, 14, 15], [4, 5, 6, 7]]
    same(stacked(out, mesh), [a, b, a, b], np.int32)


@needs4
def test_psum_scatter(mesh, rank):
    out = shmesh.psum_scatter(row(rank), "i", mesh=mesh)
    assert out.shape == ()
    same(stacked(out, mesh), [24, 28, 32, 36], np.int32)


@needs4
def test_psum_scatter_tiled(mesh, rank):
    out = shmesh.psum_scatter(row(rank), "i", tiled=True, mesh=mesh)
    same(stacked(out, mesh), [[24], [28], [32], [36]], np.int32)


@needs4
def test_psum_scatter_groups(mesh, rank):
    out = shmesh.psum_scatter(row(rank), "i", axis_index_groups=[[0, 2], [3, 1]], tiled=True,
                              mesh=mesh)
    same(stacked(out, mesh), [[8, 10], [20, 22], [12, 14], [16, 18]], np.int32)


def test_axis_index(mesh, world):
    # f(np.zeros(n)) under pmap: Array([0, 1, ..., n-1], dtype=int32)
    same(stacked(shmesh.axis_index("i", mesh=mesh), mesh), np.arange(world), np.int32)


@pytest.mark.skipif(shmesh.world_size() not in (2, 4), reason="an example for 2 devices")
def test_ragged_all_to_all(mesh, mesh2, rank, world):
    m, axis = (mesh, "i") if world == 2 else (mesh2, "x")
    d = int(shmesh.axis_index(axis, mesh=m))
    operand = [[1, 2, 2], [3, 4, 0]][d]
    input_offsets = [[0, 1], [0, 1]][d]
    send_sizes = [[1, 2], [1, 1]][d]
    output_offsets = [[0, 0], [1, 2]][d]
    recv_sizes = [[1, 1], [2, 1]][d]
    i32 = lambda v: np.asarray(v, np.int32)  # noqa: E731
    out = shmesh.ragged_all_to_all(i32(operand), np.zeros(4, np.int32), i32(input_offsets),
                                   i32(send_sizes), i32(output_offsets), i32(recv_sizes),
                                   axis_name=axis, mesh=m)
    same(out, [[1, 3, 0, 0], [2, 2, 4, 0]][d], np.int32)
