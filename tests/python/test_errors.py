"""Argument errors: shmesh.InvalidArgument (also a ValueError) with the
library's (or the binding's) sentence, raised on every rank alike, and the
context still usable after.  Errors that poison the job (Mismatch,
PeerDead, Timeout, Aborted) are in test_jobs.py, each in a job of its own."""
import re
import threading

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


def test_names_with_nul_or_separators_are_refused(mesh, rank, world):
    """ctypes ends a C string at its first NUL: "i\\0zz" reached the library
    as "i", and a name holding ',' as two names.  Refused, naming the
    argument, on every rank alike."""
    for name in ("i\0", "i\0zz", "i,i", " i", "i)"):
        with invalid(r"^rank %d: psum: axis_name %s " % (rank, re.escape(repr(name)))):
            shmesh.psum(np.ones(2), (name, "i") if name == "i\0" else name, mesh=mesh)
    with invalid(r"^rank %d: axis_size: axis_name 'i\\x00' " % rank):
        shmesh.axis_size("i\0", mesh=mesh)
    with invalid(r"^rank %d: PartitionSpec: .*'i\\x00zz'" % rank):
        shmesh.NamedSharding(mesh, shmesh.P("i\0zz"))
    with invalid(r"^rank %d: Mesh: axis_names\[0\] .*'a\\x00b'" % rank):
        shmesh.Mesh(np.arange(world), ("a\0b",))
    with invalid(r"^rank %d: Mesh: axis_names\[1\] must be a str, got None" % rank):
        shmesh.Mesh(np.arange(world).reshape(world, 1), ("a", None))
    with invalid(r"^rank %d: Effect: name 'e\\x00x' " % rank):
        shmesh.Effect("e\0x", "unordered")
    check_psum_still_right(mesh, world)


def check_psum_still_right(mesh, world):
    np.testing.assert_array_equal(shmesh.psum(np.ones(3, np.int32), "i", mesh=mesh),
                                  np.full(3, world, np.int32))


def test_non_integers_are_refused_not_truncated(mesh, rank, world):
    """int() made 0.5 a 0 and "0" a 0: a group [[0.5, 1]] ran as [[0, 1]]."""
    groups = [[0.5] + list(range(1, world))]
    with invalid(r"^rank %d: psum: axis_index_groups entry must be an integer, got 0.5"
                 % rank):
        shmesh.psum(np.ones(2), "i", axis_index_groups=groups, mesh=mesh)
    with invalid(r"^rank %d: all_gather: axis must be an integer, got '0'" % rank):
        shmesh.all_gather(np.ones(2), "i", axis="0", mesh=mesh)
    with invalid(r"^rank %d: psum_scatter: scatter_dimension must be an integer, got 0.0"
                 % rank):
        shmesh.psum_scatter(np.ones(world), "i", scatter_dimension=0.0, mesh=mesh)
    with invalid(r"^rank %d: pswapaxes: axis must be an integer, got '0'" % rank):
        shmesh.pswapaxes(np.ones((world, 2)), "i", "0", mesh=mesh)
    with invalid(r"^rank %d: ppermute: perm must be an integer, got 0.0" % rank):
        shmesh.ppermute(np.ones(2), "i", [(0.0, 0)], mesh=mesh)
    with invalid(r"^rank %d: pbroadcast: source must be an integer, got True" % rank):
        shmesh.pbroadcast(np.ones(2), "i", True, mesh=mesh)
    # numpy integers are integers
    np.testing.assert_array_equal(
        shmesh.all_gather(np.ones(2), "i", axis=np.int64(0), mesh=mesh), np.ones((world, 2)))
    check_psum_still_right(mesh, world)


def test_no_mesh_gives_the_library_sentence(mesh, rank, world):
    """Without `with mesh:` or mesh=, the sentence the library wrote for this
    thread, with the rank (it said "invalid argument", or repeated the
    context's previous, unrelated refusal)."""
    with invalid("unbound axis name 'nope'"):
        shmesh.psum(np.ones(2), "nope", mesh=mesh)  # an earlier refusal in the context
    sentence = r"^rank %d: %s: the mesh is NULL and none is pushed on this thread"
    with invalid(sentence % (rank, "shmesh_psum")):
        shmesh.psum(np.ones(2), "i")
    with invalid(sentence % (rank, "shmesh_all_gather")):
        shmesh.all_gather(np.ones(2), "i")
    with invalid(sentence % (rank, "shmesh_psum")):
        shmesh.psum_async(np.ones(2), "i")
    with invalid(sentence % (rank, "shmesh_axis_size")):
        shmesh.axis_size("i")
    with invalid(sentence % (rank, "shmesh_axis_index")):
        shmesh.axis_index("i")
    failed = []

    def inside(device):
        try:
            shmesh.psum(np.ones(2), "i")
        except shmesh.InvalidArgument as e:
            failed.append(str(e))
    with mesh:  # pushed on this thread, not on the library's, which runs callbacks
        shmesh.callback(inside, placement="self").wait()
    assert len(failed) == 1 and failed[0].startswith(
        "rank %d: shmesh_psum: the mesh is NULL and none is pushed on this thread" % rank), failed
    check_psum_still_right(mesh, world)


def test_alloc_sizes_are_checked_before_the_library_is_asked(rank, monkeypatch):
    """(2**32 + 1) * 2**32 bytes wrapped to 2**32 in int64 arithmetic, and
    (2**61 + 1) * 8 to 8 as a size_t: the library was asked for those, and
    the 8 bytes leaked when ctypes then refused the buffer's size."""
    asked = []
    real = shmesh.lib

    class Spy:
        def __getattr__(self, name):
            if name == "shmesh_alloc":
                return lambda ctx, n: asked.append(n) or real.shmesh_alloc(ctx, n)
            return getattr(real, name)
    monkeypatch.setattr(shmesh._memory, "lib", Spy())  # alloc's module
    for shape, dtype, nbytes in (((2 ** 32 + 1, 2 ** 32), np.uint8, 2 ** 64 + 2 ** 32),
                                 ((2 ** 61 + 1,), np.float64, 2 ** 64 + 8),
                                 ((2 ** 62 + 1,), np.uint8, 2 ** 62 + 1)):
        with invalid(r"^rank %d: alloc: shape %s of %s is %d bytes; an array holds at most "
                     r"2\*\*62" % (rank, re_escape(shape), np.dtype(dtype), nbytes)):
            shmesh.alloc(shape, dtype)
    with invalid(r"^rank %d: alloc: shape \(2, -1\) has a negative dimension" % rank):
        shmesh.alloc((2, -1), np.uint8)
    with invalid(r"^rank %d: alloc: a shape is an integer or a tuple of integers, got 2.5"
                 % rank):
        shmesh.alloc(2.5)
    assert asked == []
    a = shmesh.alloc((3, 2), np.int32)
    assert asked == [24] and a.shape == (3, 2) and not a.any()


def re_escape(shape):
    import re
    return re.escape(str(tuple(shape)))


def in_thread(fn):
    """fn() on a new thread: what it returned, or the exception it raised."""
    out = []

    def run():
        try:
            out.append(fn())
        except BaseException as e:  # noqa: B902 -- handed to the caller
            out.append(e)
    t = threading.Thread(target=run, name="worker")
    t.start()
    t.join()
    return out[0]


def test_another_thread_is_refused_while_the_owner_runs(mesh, rank, world):
    """The C library refuses a second thread only while the first is inside
    a call, so which of two threads a rank refused depended on timing, and
    a call of one thread on rank 0 met a call of the other on rank 1 (wrong
    sums, returned as OK).  The binding refuses every thread but the
    context's, on every rank alike, before the library is reached."""
    e = in_thread(lambda: shmesh.psum(np.ones(2), "i", mesh=mesh))
    assert isinstance(e, shmesh.InvalidArgument), e
    assert re.match(r"rank %d: psum called from thread 'worker' \(\d+\), but the context "
                    r"belongs to thread 'MainThread' \(\d+\), which is still running" % rank,
                    str(e)), str(e)
    for fn in (shmesh.barrier, lambda: shmesh.Mesh(np.arange(world), "t"),
               lambda: shmesh.alloc(4), lambda: shmesh.callback(print)):
        assert isinstance(in_thread(fn), shmesh.InvalidArgument)
    # local queries and token waits work from any thread
    assert in_thread(lambda: shmesh.axis_size("i", mesh=mesh)) == world
    assert in_thread(shmesh.rank) == rank
    p = shmesh.psum_async(np.ones(2), "i", mesh=mesh)
    np.testing.assert_array_equal(in_thread(p.block_until_ready), np.full(2, world))
    check_psum_still_right(mesh, world)


def test_hand_over(mesh, rank, world):
    """hand_over(thread) gives the context to a thread (from the one that
    holds it); a thread that ended gives it up to the next that calls."""
    got = []

    def work():
        got.append(shmesh.psum(np.full(2, rank + 1), "i", mesh=mesh))
    t = threading.Thread(target=work)
    shmesh.hand_over(t)
    t.start()
    t.join()
    np.testing.assert_array_equal(got[0], np.full(2, world * (world + 1) // 2))
    check_psum_still_right(mesh, world)  # t ended: this thread takes the context back
    with invalid(r"^rank %d: hand_over: thread must be a threading.Thread" % rank):
        shmesh.hand_over("main")
    e = in_thread(lambda: shmesh.hand_over(threading.current_thread()))
    assert isinstance(e, shmesh.InvalidArgument) and "belongs to thread 'MainThread'" in str(e)
