"""Async dispatch, tokens and effects from Python: every `_async` collective
gives its blocking twin's result (and numpy's), in dispatch order; tokens
wait, test, wait_all and wait_any; dropped work keeps its buffers alive
until done; argument errors raise at dispatch with nothing dispatched;
callbacks run in order, on the right devices, and their exceptions reach
wait() and effects_barrier()."""
import copy
import gc
import threading
import time
import weakref

import numpy as np
import pytest

import shmesh
from conftest import check, inputs, mesh2_shape, x_of
from gate import open_gate, wait_gate

eq = np.testing.assert_array_equal


def same_tree(a, b):
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            same_tree(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for u, v in zip(a, b):
            same_tree(u, v)
    else:
        check(np.asarray(b), np.asarray(a))


def ragged_args(rank, world):
    """Rank r sends 1 + (r + j) % 2 rows to rank j, stacked in sender order."""
    def s(r, j):
        return 1 + (r + j) % 2
    operand = (100 * rank + np.arange(2 * world * 2).reshape(2 * world, 2)).astype(np.int32)
    in_off = np.cumsum([0] + [s(rank, j) for j in range(world)])[:-1].astype(np.int32)
    send = np.asarray([s(rank, j) for j in range(world)], np.int32)
    out_off = np.asarray([sum(s(q, j) for q in range(rank)) for j in range(world)], np.int32)
    recv = np.asarray([s(j, rank) for j in range(world)], np.int32)
    output = np.full((2 * world, 2), -1, np.int32)
    want = output.copy()
    row = 0
    for q in range(world):
        start = sum(s(q, j) for j in range(rank))
        opq = (100 * q + np.arange(2 * world * 2).reshape(2 * world, 2)).astype(np.int32)
        want[row:row + s(q, rank)] = opq[start:start + s(q, rank)]
        row += s(q, rank)
    return (operand, output, in_off, send, out_off, recv), want


def cases(rank, world):
    """{name: (args, kwargs, numpy's expectation)} on the 1-D mesh "i"."""
    xs = inputs(world, x_of)
    ints = inputs(world, lambda r: x_of(r, (3, 4), np.int32))
    ties = inputs(world, lambda r: x_of(r, (3, 4), np.float64) % 3)
    sq = inputs(world, lambda r: x_of(r, (world, 3)))
    tall = inputs(world, lambda r: x_of(r, (2 * world, 3), np.int64))
    ring = [(j, (j + 1) % world) for j in range(world)]
    rev = list(range(world))[::-1]
    rargs, rwant = ragged_args(rank, world)
    tree = {"a": xs[rank], "b": [ints[rank], np.float64(rank)]}
    return {
        "psum": ((xs[rank], "i"), {}, np.sum(xs, axis=0).astype(np.float32)),
        "psum_tree": ((tree, "i"), {}, {"a": np.sum(xs, axis=0).astype(np.float32),
                                        "b": [np.sum(ints, axis=0).astype(np.int32),
                                              np.float64(sum(range(world)))]}),
        "pmean": ((xs[rank], "i"), {}, np.mean(xs, axis=0).astype(np.float32)),
        "pmax": ((ints[rank], "i"), {}, np.max(ints, axis=0)),
        "pmin": ((ints[rank], "i"), {}, np.min(ints, axis=0)),
        "pargmax": ((ties[rank], "i"), {}, np.argmax(ties, axis=0).astype(np.int32)),
        "pargmin": ((ties[rank], "i"), {}, np.argmin(ties, axis=0).astype(np.int32)),
        "all_gather": ((xs[rank], "i"), {"axis": 1}, np.stack(xs, axis=1)),
        "all_gather_tiled": ((xs[rank], "i"), {"tiled": True}, np.concatenate(xs, axis=0)),
        "psum_scatter": ((tall[rank], "i"), {"tiled": True},
                         np.sum(tall, axis=0)[2 * rank:2 * rank + 2]),
        "all_to_all": ((sq[rank], "i", 0, 0), {}, np.stack([sq[q][rank] for q in range(world)])),
        "pswapaxes": ((sq[rank], "i", 0), {}, np.stack([sq[q][rank] for q in range(world)])),
        "ppermute": ((xs[rank], "i", ring), {}, xs[(rank - 1) % world]),
        "pshuffle": ((xs[rank], "i", rev), {}, xs[rev[rank]]),
        "pbroadcast": ((xs[rank], "i", world - 1), {}, xs[world - 1]),
        "ragged_all_to_all": (rargs, {"axis_name": "i"}, rwant),
    }


NAMES = ["psum", "psum_tree", "pmean", "pmax", "pmin", "pargmax", "pargmin", "all_gather",
         "all_gather_tiled", "psum_scatter", "all_to_all", "pswapaxes", "ppermute", "pshuffle",
         "pbroadcast", "ragged_all_to_all"]


def op_of(name):
    return name.replace("_tree", "").replace("_tiled", "")


@pytest.mark.parametrize("name", NAMES)
def test_async_equals_blocking(mesh, rank, world, name):
    args, kw, want = cases(rank, world)[name]
    blocking = getattr(shmesh, op_of(name))(*args, mesh=mesh, **kw)
    p = getattr(shmesh, op_of(name) + "_async")(*args, mesh=mesh, **kw)
    assert isinstance(p, shmesh.Pending) and isinstance(p.token, shmesh.Token)
    got = p.block_until_ready()
    assert p.is_ready() and p.token.is_ready()
    same_tree(blocking, got)
    if name == "pmean":
        np.testing.assert_allclose(got, want, rtol=1e-6)
    else:
        same_tree(want, got)
    assert p.block_until_ready() is got  # waitable twice: the same result


def test_barrier_async():
    p = shmesh.barrier_async()
    assert p.block_until_ready() is None
    assert p.is_ready()


def test_async_on_a_2d_mesh(mesh2, rank, world):
    sx, sy = mesh2_shape(world)
    me = x_of(rank)
    xs = inputs(world, x_of)
    col = [q for q in range(world) if q % sy == rank % sy]  # my "x" group
    with mesh2:
        p1 = shmesh.psum_async(me, "x")
        p2 = shmesh.all_gather_async(me, ("x", "y"))
        p3 = shmesh.pmax_async(me, "y")
        got1, got2, got3 = (p.block_until_ready() for p in (p1, p2, p3))
        check(got1, shmesh.psum(me, "x"))
        check(got2, shmesh.all_gather(me, ("x", "y")))
        check(got3, shmesh.pmax(me, "y"))
    check(got1, np.sum([xs[q] for q in col], axis=0).astype(np.float32))
    check(got2, np.stack(xs))
    row = [q for q in range(world) if q // sy == rank // sy]
    check(got3, np.max([xs[q] for q in row], axis=0))


def test_groups_async(mesh, rank, world):
    groups = [[0, 1], [2, 3]] if world == 4 else [list(range(world))]
    mine = next(g for g in groups if rank in g)
    xs = inputs(world, x_of)
    p = shmesh.psum_async(xs[rank], "i", axis_index_groups=groups, mesh=mesh)
    check(p.block_until_ready(), np.sum([xs[q] for q in mine], axis=0).astype(np.float32))


def test_dispatch_order_wait_last(mesh, rank, world):
    ps = [shmesh.psum_async(np.full(4, rank + i, np.int64), "i", mesh=mesh) for i in range(6)]
    last = ps[-1].token
    last.wait()
    last.wait()  # twice: a value
    for i, p in enumerate(ps):  # earlier work is done too (dispatch order)
        assert p.is_ready(), i
        check(p.block_until_ready(), np.full(4, sum(range(world)) + world * i, np.int64))


def test_wait_all_and_wait_any(mesh, rank, world):
    ps = [shmesh.pmax_async(np.int32(rank + i), "i", mesh=mesh) for i in range(3)]
    i = shmesh.wait_any([p.token for p in ps[::-1]])
    assert 0 <= i < 3 and ps[::-1][i].is_ready()
    shmesh.wait_all(ps)
    assert all(p.is_ready() for p in ps)
    for i, p in enumerate(ps):
        check(p.block_until_ready(), np.int32(world - 1 + i))
    # once all are done, wait_any gives the earliest in dispatch order
    assert shmesh.wait_any([p.token for p in ps]) == 0
    shmesh.wait_all([])
    with pytest.raises(shmesh.InvalidArgument):
        shmesh.wait_any([])
    with pytest.raises(shmesh.InvalidArgument):
        shmesh.wait_all([1])


def test_token_is_a_value(mesh, world):
    p = shmesh.psum_async(np.int32(1), "i", mesh=mesh)
    t = p.token
    assert copy.copy(t) is t and copy.deepcopy(t) is t
    t.wait()
    t.wait()
    assert t.is_ready()
    assert repr(t).startswith("Token(seq=") and "done" in repr(t)
    check(p.block_until_ready(), np.int32(world))


def test_dropped_pending_keeps_its_buffers(mesh, rank, world):
    """Work dropped before it is done keeps its input and output alive (the
    registry), releases them once seen done, and writes nothing into memory
    reused since.  The last rank dispatches late (once the others have
    looked: gate.py), so the others' work is pending while they drop it."""
    n = 4096  # 32 KiB: below malloc's mmap threshold, so freed memory is reused at once
    late = world > 1 and rank == world - 1
    if late:
        wait_gate(*("dropped-%d" % q for q in range(world - 1)))
    x = np.full(n, rank + 1, np.float64)
    wx = weakref.ref(x)
    p = shmesh.psum_async(x, "i", mesh=mesh)
    wout = weakref.ref(p._result)
    del x, p
    gc.collect()
    if world > 1 and not late:
        try:
            assert wx() is not None and wout() is not None, "the registry let go of pending work"
        finally:
            open_gate("dropped-%d" % rank)
    # fresh arrays, likely where the dropped ones would have been
    fresh = [np.full(n, 7.0) for _ in range(8)]
    shmesh.runtime_token().wait()
    for f in fresh:
        assert (f == 7.0).all(), "dropped work wrote into freed memory"
    y = shmesh.psum(np.full(n, rank, np.float64), "i", mesh=mesh)
    check(y, np.full(n, float(sum(range(world)))))
    shmesh.psum_async(np.int32(0), "i", mesh=mesh).block_until_ready()  # prunes the registry
    gc.collect()
    assert wx() is None and wout() is None, "done work still held by the registry"


def test_argument_errors_raise_at_dispatch(mesh, rank, world):
    before = shmesh.runtime_token()
    with pytest.raises(shmesh.InvalidArgument, match="nosuch"):
        shmesh.psum_async(np.ones(2), "nosuch", mesh=mesh)
    with pytest.raises(shmesh.InvalidArgument, match="axis"):
        shmesh.all_gather_async(np.ones(2), "i", axis=3, mesh=mesh)
    with pytest.raises(shmesh.InvalidArgument, match="unique"):  # the C library's check
        shmesh.ppermute_async(np.ones(2), "i", [(0, 0), (0, 0)], mesh=mesh)
    with pytest.raises(shmesh.InvalidArgument, match="placement"):
        shmesh.callback(print, placement="nowhere")
    with pytest.raises(shmesh.InvalidArgument, match="kind"):
        shmesh.Effect("e", "sometimes")
    # nothing was dispatched: the dispatch queue is where it was, and the next
    # collective matches on every rank
    after = shmesh.runtime_token()
    assert after._t.seq == before._t.seq, (before, after)
    check(shmesh.psum_async(np.int32(1), "i", mesh=mesh).block_until_ready(), np.int32(world))
    check(shmesh.psum(np.int32(2), "i", mesh=mesh), np.int32(2 * world))


def test_runtime_token(mesh, world):
    ps = [shmesh.psum_async(np.float32(i), "i", mesh=mesh) for i in range(4)]
    t = shmesh.runtime_token()
    assert isinstance(t, shmesh.Token)
    t.wait()
    assert all(p.is_ready() for p in ps)
    check(ps[-1].block_until_ready(), np.float32(3 * world))
    seen = []
    th = threading.Thread(target=lambda: seen.append(shmesh.runtime_token().is_ready()))
    th.start()
    th.join()
    assert seen == [True]  # a thread that dispatched nothing: done


# ---- effects and callbacks ----------------------------------------------------------

EFFECTS = {}


def effect(name, kind):
    """Effects are collective and at most 32 per context: one per name for the session."""
    if name not in EFFECTS:
        EFFECTS[name] = shmesh.Effect(name, kind)
    return EFFECTS[name]


def test_ordered_effect_runs_in_program_order(mesh, rank, world):
    e = effect("log", "ordered")
    assert e.name == "log" and e.kind == "ordered"
    got = []
    toks = []

    def log(dev, i):
        time.sleep((12 - i) * 0.001)  # an earlier one takes longer: order is not by chance
        got.append((dev, i))
    for i in range(12):
        toks.append(shmesh.callback(log, i, effect=e, placement=0))
        if i % 4 == 0:  # collectives in between, on the same dispatch queue
            shmesh.psum_async(np.int32(i), "i", mesh=mesh)
    shmesh.effects_barrier()
    assert all(t.is_ready() for t in toks)
    assert e.token.is_ready()
    # device 0 is rank 0's: it runs them all, in order; the others none
    assert got == ([(0, i) for i in range(12)] if rank == 0 else [])
    # every rank's token is done once rank 0 ran it
    check(shmesh.psum(np.int32(len(got)), "i", mesh=mesh), np.int32(12))


def test_ordered_shardable_effect(mesh, rank, world):
    e = effect("shard", "ordered_shardable")
    got = []
    for i in range(5):
        shmesh.callback(lambda dev, i: got.append((dev, i)), i, effect=e)
    shmesh.effects_barrier()
    assert got == [(rank, i) for i in range(5)]


def test_ordered_effect_on_all_devices_is_invalid(mesh, world):
    e = effect("log", "ordered")
    if world == 1:  # one device: "all" is exactly one, which an ordered effect may take
        shmesh.callback(lambda dev: None, effect=e).wait()
        return
    with pytest.raises(shmesh.InvalidArgument):
        shmesh.callback(lambda dev: None, effect=e)
    check(shmesh.psum(np.int32(1), "i", mesh=mesh), np.int32(world))


@pytest.mark.parametrize("placement", ["all", "self", 0, -1])
def test_callback_devices(mesh, rank, world, placement):
    place = placement % world if isinstance(placement, int) else placement
    got = []
    t = shmesh.callback(lambda dev, tag: got.append((dev, tag)), "x", placement=place)
    t.wait()
    shmesh.effects_barrier()
    if place in ("all", "self"):
        assert got == [(rank, "x")]  # one device per rank: its id is the rank
    else:
        assert got == ([(place, "x")] if rank == place else [])
        check(shmesh.psum(np.int32(len(got)), "i", mesh=mesh), np.int32(1))


def test_callback_exception_reaches_wait_and_barrier(mesh, rank, world, capfd):
    def bad(dev, what):
        raise ValueError("bad %s on %d" % (what, dev))

    t = shmesh.callback(bad, "thing")
    with pytest.raises(shmesh.CallbackError, match="ValueError: bad thing on %d" % rank) as ei:
        t.wait()
    assert isinstance(ei.value.exception, ValueError) and ei.value.device == rank
    assert ei.value.__cause__ is ei.value.exception
    with pytest.raises(shmesh.CallbackError):
        t.wait()  # again: the token keeps its failure
    with pytest.raises(shmesh.CallbackError):
        t.is_ready()
    with pytest.raises(shmesh.CallbackError, match="bad thing"):
        shmesh.effects_barrier()
    shmesh.effects_barrier()  # reported once
    err = capfd.readouterr().err
    assert "shmesh: rank %d: callback" % rank in err and "ValueError: bad thing" in err, err
    # the dispatch queue goes on
    check(shmesh.psum_async(np.int32(1), "i", mesh=mesh).block_until_ready(), np.int32(world))
    # and a failure seen only by effects_barrier (the token never waited)
    shmesh.callback(bad, "again", placement="self")
    with pytest.raises(shmesh.CallbackError, match="bad again"):
        shmesh.effects_barrier()


def test_callback_runs_after_earlier_work(mesh, rank, world):
    """A callback runs after the collectives dispatched before it (it sees
    their outputs written), and its token is done after it returned."""
    ps = [shmesh.psum_async(np.full(1000, i, np.int64), "i", mesh=mesh) for i in range(3)]
    seen = []

    def look(dev):
        time.sleep(0.02)  # the token is done only once the callback returned
        seen.append([int(p._result[-1]) for p in ps])
    t = shmesh.callback(look, placement="self")
    t.wait()
    assert seen == [[world * i for i in range(3)]]
