"""A job for test_devices.py: every collective of the binding on a mesh of
8 devices, whatever number of ranks holds them.

    shmesh-run -n R [--devices-per-rank K] -- python3 devices_job.py OUTDIR

(R * K = 8.)  The mesh is ("a", "b", "c") of shape (2, 2, 2) over device ids
0..7.  Device d's inputs are functions of d alone, and its results are
written to OUTDIR/dev<d>.npz, one entry per case: with K devices per rank,
a rank passes every argument with a leading axis of K entries (entry i for
mesh.local_devices[i]) and takes its results apart the same way.  The same
job with 8 ranks of one device, 4 of two and 1 of eight must write the
same files, bit for bit: the library promises results identical to one
device per rank.  With K > 1 it also checks that an input without that
leading axis is refused with InvalidArgument ("refused: ..." on stdout).
"""
import os
import sys

import numpy as np

import shmesh


def x_of(d):
    """Device d's float32 input: 4x6, distinct per device and element."""
    return (np.arange(24, dtype=np.float32).reshape(4, 6) * (d + 1) + d / 8).astype(np.float32)


def i_of(d):
    """Device d's int32 input, with ties and sign changes for pmax/pargmax."""
    return ((np.arange(12).reshape(2, 6) * (d % 3) - 7 * (d % 2)) % 5 - 2).astype(np.int32)


def ragged_args(d, pos_b, n):
    """ragged_all_to_all over "b" (n = 2 members): the member at index j
    sends 1 + (j + k) % 2 rows to member k, which stacks them in sender
    order."""
    def s(j, k):
        return 1 + (j + k) % 2
    j = pos_b
    operand = (100 * d + np.arange(8).reshape(4, 2)).astype(np.int32)
    in_off = np.cumsum([0] + [s(j, k) for k in range(n)])[:-1].astype(np.int32)
    send = np.array([s(j, k) for k in range(n)], np.int32)
    out_off = np.array([sum(s(q, k) for q in range(j)) for k in range(n)], np.int32)
    recv = np.array([s(k, j) for k in range(n)], np.int32)
    output = np.full((5, 2), -1, np.int32)
    return operand, output, in_off, send, out_off, recv


def main(outdir):
    shmesh.init()
    k = shmesh._context._local_devices
    mesh = shmesh.Mesh(np.arange(8).reshape(2, 2, 2), ("a", "b", "c"))
    ids = mesh.local_devices
    assert len(ids) == k, (ids, k)

    def stack(f):
        """The argument f(d) of every local device, as the binding takes it."""
        return f(ids[0]) if k == 1 else np.stack([np.asarray(f(d)) for d in ids])

    def per_device(v):
        """A result taken apart: {device id: its array}."""
        return {ids[0]: np.asarray(v)} if k == 1 else {d: np.asarray(v[i])
                                                      for i, d in enumerate(ids)}

    x = stack(x_of)
    xi = stack(i_of)
    pos_b = shmesh.axis_index("b", mesh=mesh)
    results = {}

    def case(name, v):
        for d, a in per_device(v).items():
            results.setdefault(d, {})[name] = a

    with mesh:
        case("axis_index_b", pos_b)
        case("axis_index_cab", shmesh.axis_index(("c", "a", "b")))
        case("psum_a", shmesh.psum(x, "a"))
        case("psum_abc", shmesh.psum(x, ("a", "b", "c")))
        case("psum_groups", shmesh.psum(xi, ("b", "c"), axis_index_groups=[[0, 3], [2, 1]]))
        case("pmean_bc", shmesh.pmean(xi, ("b", "c")))
        case("pmax_c", shmesh.pmax(xi, "c"))
        case("pmin_ab", shmesh.pmin(x, ("a", "b")))
        case("pargmax_b", shmesh.pargmax(xi, "b"))
        case("pargmin_a", shmesh.pargmin(xi, "a"))
        case("all_gather", shmesh.all_gather(x, ("a", "c")))
        case("all_gather_tiled", shmesh.all_gather(x, "b", axis=1, tiled=True))
        case("psum_scatter", shmesh.psum_scatter(x, ("b", "c"), scatter_dimension=0,
                                                 tiled=True))
        case("psum_scatter_untiled", shmesh.psum_scatter(xi, "a", scatter_dimension=0))
        case("all_to_all", shmesh.all_to_all(stack(lambda d: x_of(d)[:2]), "c", 0, 1))
        case("all_to_all_tiled", shmesh.all_to_all(x, ("a", "b"), 0, 1, tiled=True))
        case("pswapaxes", shmesh.pswapaxes(stack(lambda d: x_of(d)[:2]), "b", 0))
        case("ppermute", shmesh.ppermute(x, ("a", "b"), perm=[(0, 1), (1, 3), (3, 0)]))
        case("pshuffle", shmesh.pshuffle(xi, "c", perm=[1, 0]))
        case("pbroadcast", shmesh.pbroadcast(x, ("c", "b"), 2))
        tree = shmesh.psum({"w": x, "b": [xi, stack(lambda d: np.float64(d))]}, "a")
        case("tree_w", tree["w"])
        case("tree_b0", tree["b"][0])
        case("tree_b1", tree["b"][1])
        # a tree in buckets of 64 bytes (several leaves each, one alone)
        # and per leaf: the same bits, and the same on every layout
        t2 = {"w": x, "v": stack(lambda d: x_of(d)[1:3] / 3), "s": stack(lambda d: np.float32(d / 7)),
              "z": stack(lambda d: np.zeros((0, 2), np.float32))}
        for b in (0, 64):
            got = shmesh.pmean(t2, ("a", "b", "c"), bucket_bytes=b)
            for key in t2:
                case("bucket%d_%s" % (b, key), got[key])
        for key in t2:
            for d in per_device(got[key]):
                if results[d]["bucket0_" + key].tobytes() != results[d]["bucket64_" + key].tobytes():
                    raise AssertionError("bucketed pmean of %s differs from per leaf" % key)
        # ragged_all_to_all: each device's arguments depend on its index along "b"
        pos = {d: int(p) for d, p in per_device(pos_b).items()}
        rargs = [stack(lambda d, i=i: ragged_args(d, pos[d], 2)[i]) for i in range(6)]
        case("ragged", shmesh.ragged_all_to_all(*rargs, axis_name="b"))

        # a global array over each device's block, gathered whole
        g = np.arange(48, dtype=np.float32).reshape(8, 6)
        sh = shmesh.NamedSharding(mesh, shmesh.P(("c", "a", "b")))
        imap = sh.devices_indices_map(g.shape)
        ga = shmesh.make_array_from_single_device_arrays(
            g.shape, sh, [np.array(g[imap[d]]) for d in ids])
        whole = np.asarray(ga)
        case("from_blocks", stack(lambda d: whole))

        if k > 1:
            try:
                shmesh.psum(np.zeros(3, np.float32), "a")
            except shmesh.InvalidArgument as e:
                print("refused: %s" % e, flush=True)
            try:  # 9 dimensions per device: one too many, the device axis aside
                shmesh.psum(np.zeros((k,) + (1,) * 9, np.float32), "a")
            except shmesh.InvalidArgument as e:
                print("too many dimensions: %s" % e, flush=True)
            # the refusal happened before anything was shared: the job goes on
            case("after_refusal", shmesh.psum(x, "a"))
        else:
            case("after_refusal", shmesh.psum(x, "a"))

    for d, r in results.items():
        np.savez(os.path.join(outdir, "dev%d.npz" % d), **r)
    shmesh.barrier()
    mesh.close()
    shmesh.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
