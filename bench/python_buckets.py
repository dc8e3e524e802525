#!/usr/bin/python3
"""python_buckets.py: pmean of a gradient pytree, bucketed against per leaf.

    /usr/bin/python3 bench/python_buckets.py [-n RANKS] [-r ROUNDS] [-i ITERS]

The tree is ResNet-18's gradients plus a bias per convolution: 100 float32
leaves, 11.7 million elements (46.8 MB), most of them small (64 to 1000
elements) and a few large (up to 2.4 million).  Each round launches, with
the same ranks, in an order that turns every round:

  bucketed   shmesh.pmean(tree, "i"): leaves packed into buckets of at most
             shmesh.BUCKET_BYTES (1 MiB), one collective per bucket
  per-leaf   shmesh.pmean(tree, "i", bucket_bytes=0): one per leaf
  mpi4py     comm.Allreduce of each leaf into a preallocated numpy array,
             then / size (Debian's python3-mpi4py under mpirun; skipped,
             saying so, when it cannot be imported: a baseline only)

-b B1,B2,... times buckets of those sizes too; --small takes 100 leaves of
256 float32 instead; --all-gather times all_gather (untiled, axis 0) of the
tree instead of pmean (mpi4py: comm.Allgather of each leaf into a
preallocated array).  Each worker times ITERS steps after 2 untimed ones: a barrier, then the
mean per step, the largest over ranks.  Prints each side's median over the
rounds and the ratios to bucketed.  The bucketed result is checked against
the per-leaf one bit for bit on every rank.  The library and package are
found as docs/python.md says (SHMESH_LIBRARY and PYTHONPATH set to the
build tree's when unset).
"""
import argparse
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def resnet18_shapes():
    """ResNet-18's parameter shapes, and a bias for each convolution."""
    shapes = [(64, 3, 7, 7)]
    convs = [(64, 64)] * 4 + [(128, 64), (128, 128), (128, 128), (128, 128)] + \
        [(256, 128), (256, 256), (256, 256), (256, 256)] + \
        [(512, 256), (512, 512), (512, 512), (512, 512)]
    shapes += [(o, i, 3, 3) for o, i in convs]
    shapes += [(128, 64, 1, 1), (256, 128, 1, 1), (512, 256, 1, 1)]  # downsampling
    shapes += [(1000, 512), (1000,)]  # fc
    bn = [64] + [o for o, _ in convs] + [128, 256, 512]
    shapes += [(c,) for c in bn for _ in range(2)]  # weight and bias
    shapes += [(c,) for c in bn]  # a bias per convolution
    shapes += [(64,)] * (100 - len(shapes))
    return shapes[:100]


SMALL = os.environ.get("PYTHON_BUCKETS_SMALL") == "1"  # --small, for the workers
GATHER = os.environ.get("PYTHON_BUCKETS_GATHER") == "1"  # --all-gather


def shapes():
    """ResNet-18's, or with --small 100 leaves of 256 elements."""
    return [(256,)] * 100 if SMALL else resnet18_shapes()


def tree_of(np, rank):
    rng = np.random.default_rng(rank)
    return {"layer%02d" % i: rng.standard_normal(s).astype(np.float32)
            for i, s in enumerate(shapes())}


def worker(side, iters):
    import time
    import numpy as np
    if side == "mpi4py":
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        rank, size = comm.Get_rank(), comm.Get_size()
        tree = tree_of(np, rank)
        outs = {k: np.empty((size,) + v.shape if GATHER else v.shape, v.dtype)
                for k, v in tree.items()}

        def step():
            for k, v in tree.items():
                if GATHER:
                    comm.Allgather(v, outs[k])
                else:
                    comm.Allreduce(v, outs[k], op=MPI.SUM)
                    outs[k] /= size
        barrier = comm.Barrier

        def largest(t):
            return comm.allreduce(t, op=MPI.MAX)
    else:
        import shmesh
        shmesh.init()
        rank = shmesh.rank()
        mesh = shmesh.Mesh(np.arange(shmesh.world_size()), ("i",))
        tree = tree_of(np, rank)
        bucket = (shmesh.BUCKET_BYTES if side == "bucketed" else 0 if side == "per-leaf"
                  else int(side.split("=")[1]))

        op = shmesh.all_gather if GATHER else shmesh.pmean

        def step(bucket=bucket):
            return op(tree, "i", mesh=mesh, bucket_bytes=bucket)
        barrier = shmesh.barrier

        def largest(t):
            return float(shmesh.pmax(np.float64(t), "i", mesh=mesh))
        if side == "bucketed":
            a, b = step(), step(0)
            for k in tree:
                if a[k].tobytes() != b[k].tobytes():
                    sys.exit("rank %d: bucketed %s differs from per leaf" % (rank, k))
            del a, b  # freed, as every step's results are: the loop reuses their memory
    for _ in range(2):
        step()
    barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    t = largest((time.perf_counter() - t0) / iters)
    if rank == 0:
        print("RESULT %.6f" % t, flush=True)
    if side != "mpi4py":
        shmesh.finalize()


def launch(side, ranks, iters):
    env = dict(os.environ)
    env.setdefault("SHMESH_LIBRARY", os.path.join(ROOT, "build", "lib", "libshmesh.so.0"))
    env.setdefault("PYTHONPATH", os.path.join(ROOT, "python"))
    me = [sys.executable, os.path.abspath(__file__), "--worker", side, "-i", str(iters)]
    if side == "mpi4py":
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + me
    else:
        cmd = [os.path.join(ROOT, "build", "launcher", "shmesh-run"), "-n", str(ranks),
               "--timeout", "300", "--"] + me
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return float(line.split()[1])
    sys.exit("%s: exit status %d:\n%s" % (" ".join(cmd), p.returncode, p.stdout))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("-r", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("-i", type=int, default=20, help="timed steps per launch (default 20)")
    ap.add_argument("-b", default="", help="more bucket sizes to time, comma-separated bytes")
    ap.add_argument("--small", action="store_true",
                    help="100 leaves of 256 float32 instead (1 KiB each)")
    ap.add_argument("--all-gather", action="store_true",
                    help="all_gather the tree (untiled, axis 0) instead of pmean")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.small:
        global SMALL
        SMALL = True
        os.environ["PYTHON_BUCKETS_SMALL"] = "1"
    if a.all_gather:
        global GATHER
        GATHER = True
        os.environ["PYTHON_BUCKETS_GATHER"] = "1"
    if a.worker:
        return worker(a.worker, a.i)
    sides = ["bucketed", "per-leaf", "mpi4py"] + ["bucket=%d" % int(b) for b in a.b.split(",") if b]
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        print("# mpi4py: not importable here (Debian: python3-mpi4py): left out")
        sides.remove("mpi4py")
    leaves = shapes()
    elems = sum(int(__import__("math").prod(s)) for s in leaves)
    print("# " + ("all_gather" if GATHER else "pmean") + " of %d float32 leaves (%.1f MB), %d ranks, %d steps per launch, %d rounds"
          % (len(leaves), elems * 4 / 1e6, a.n, a.i, a.r))
    times = {s: [] for s in sides}
    for r in range(a.r):
        order = sides[r % len(sides):] + sides[:r % len(sides)]
        for s in order:
            times[s].append(launch(s, a.n, a.i))
    base = statistics.median(times["bucketed"])
    for s in sides:
        m = statistics.median(times[s])
        print("%-9s %9.3f ms per step (median; rounds %s)  %.2fx bucketed"
              % (s, m * 1e3, ", ".join("%.2f" % (t * 1e3) for t in times[s]), m / base))


if __name__ == "__main__":
    main()
