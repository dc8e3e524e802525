#!/usr/bin/python3
"""python_overhead.py: what the Python binding adds to a psum.

    /usr/bin/python3 bench/python_overhead.py [-n RANKS] [-r ROUNDS] [-s SIZE,...]

For each size (default 8 B and 16 MiB of float32), runs shmesh-bench
(`-o psum -b SIZE -e SIZE -c 0 --csv`), this file's worker (the same
psum from Python: `shmesh.psum(x, "i", mesh=mesh)` over a mesh of one axis
i spanning the ranks) and, where mpi4py imports, its mpi4py worker
(`comm.Allreduce(x, out)` into a preallocated array, under Open MPI's
mpirun), each launched with the same ranks, warm-up and iterations,
alternating which goes first every round.  The shmesh worker times the
compiled callable (shmesh.psum: python/shmesh/_ext.c, its fast path in C)
and the general path (shmesh.psum.__wrapped__: the package's Python
function, where groups, several axes, several devices per rank, pytrees
and tensors go, which asks the library for the result's shape and calls
it through the compiled module's generic entry) in the same process, one
loop after the other.  Every side times its loop
the same way: a barrier, then the mean per call over the iterations, the
largest over ranks.  It prints the median of the rounds for each, the
microseconds Python adds per call (py - C) and Python's time over
mpi4py's; then the fastest round of each ("fastest rounds"), since this
machine's slow phases (seen to double a loop's time for seconds at a
time) hit the sides unevenly.

The worker also times the compiled psum with out= (the result written
into a preallocated array, as mpi4py's loop does): the "py_out" column.
Where torch imports, the worker also times the psum of a torch tensor of
the same values (the input handed over without a copy, the result a tensor
on the result's memory), and checks both.

With --moves, each shmesh worker also times all_gather, psum_scatter and
all_to_all (tiled, along dimension 0, of an input of SIZE bytes times the
ranks, so that it splits) through the compiled callable and the general path,
and a line per op gives the medians of both.

The worker also times the same psum on a non-contiguous view of as many
elements (x2[::2]), which the binding must copy before the call, and checks
with np.shares_memory that the array handed to the library for a
contiguous input is the input itself (no copy) and for the view is not:
the time difference of the two is then the copy's (one pass over SIZE
bytes), and a contiguous input does not pay it.

Every Python call also allocates its result (np.empty: JAX's functions
return new arrays); that cost is part of the figure, as it is of any use
of the API.  The library and package are found as docs/python.md says
(this script sets SHMESH_LIBRARY to build/lib/libshmesh.so.0 and
PYTHONPATH to python/ when they are unset).  See bench/README.md.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def iters_for(size):
    """Iterations and warm-up for a size: about a tenth of a second of C."""
    if size <= 4096:
        return 20000, 1000
    return max(30, min(20000, (1 << 30) // (size * 8))), 5


# ---- the worker (under shmesh-run) ------------------------------------------

def worker(size, iters, warm):
    import numpy as np

    import shmesh
    shmesh.init()
    n = shmesh.world_size()
    mesh = shmesh.Mesh(np.arange(n), ("i",))
    count = max(size // 4, 1)
    x = np.arange(count, dtype=np.float32)            # contiguous: used in place
    view = np.arange(2 * count, dtype=np.float32)[::2]  # the same values, strided

    # The array the binding gives the library: the input itself, or a copy.
    same = np.shares_memory(shmesh._prepare(x, "psum"), x)
    copied = not np.shares_memory(shmesh._prepare(view, "psum"), view)
    ok = bool(np.array_equal(shmesh.psum(x, "i", mesh=mesh), x * n)
              and np.array_equal(shmesh.psum(view, "i", mesh=mesh), view * n))

    psum_py = shmesh.psum.__wrapped__  # the general path
    ok = ok and np.array_equal(psum_py(x, "i", mesh=mesh), x * n)

    def timed(a, psum=shmesh.psum):
        for _ in range(warm):
            psum(a, "i", mesh=mesh)
        shmesh.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            psum(a, "i", mesh=mesh)
        us = (time.perf_counter() - t0) / iters * 1e6
        return float(shmesh.pmax(np.float64(us), "i", mesh=mesh))  # the slowest rank's

    def timed_out(a, o, psum=shmesh.psum):  # the same loop with out= (no **kw: it costs)
        for _ in range(warm):
            psum(a, "i", mesh=mesh, out=o)
        shmesh.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            psum(a, "i", mesh=mesh, out=o)
        us = (time.perf_counter() - t0) / iters * 1e6
        return float(shmesh.pmax(np.float64(us), "i", mesh=mesh))

    t_contig = timed(x)
    t_general = timed(x, psum_py)
    t_view = timed(view)
    into = np.empty_like(x)
    t_out = timed_out(x, into)
    ok = ok and bool(np.array_equal(into, x * n))
    try:
        import torch
        tx = torch.from_numpy(x.copy())
        t_torch = timed(tx)
        ok = ok and bool(np.array_equal(shmesh.psum(tx, "i", mesh=mesh).numpy(), x * n))
        if shmesh.rank() == 0:
            print("torch,%.3f" % t_torch)
    except ImportError:
        pass
    if os.environ.get("PYTHON_OVERHEAD_MOVES") == "1":
        xm = np.arange(max(size // 4, 1) * n, dtype=np.float32)
        calls = {"all_gather": lambda f: f(xm, "i", mesh=mesh, tiled=True),
                 "psum_scatter": lambda f: f(xm, "i", mesh=mesh, tiled=True),
                 "all_to_all": lambda f: f(xm, "i", 0, 0, mesh=mesh, tiled=True)}
        for name, call in calls.items():
            f = getattr(shmesh, name)
            ts = []
            for g in (f, getattr(f, "__wrapped__", f)):
                for _ in range(warm):
                    call(g)
                shmesh.barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    call(g)
                us = (time.perf_counter() - t0) / iters * 1e6
                ts.append(float(shmesh.pmax(np.float64(us), "i", mesh=mesh)))
            if shmesh.rank() == 0:
                print("move,%s,%.3f,%.3f" % (name, ts[0], ts[1]))
    if shmesh.rank() == 0:
        print("py,%d,%.3f,%.3f,%d,%d,%d,%.3f,%d,%.3f" % (size, t_contig, t_view, same, copied,
                                                        ok, t_general, 1, t_out))
    mesh.close()
    shmesh.finalize()


def mpi_worker(size, iters, warm):
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    x = np.arange(max(size // 4, 1), dtype=np.float32)
    out = np.empty_like(x)
    for _ in range(warm):
        comm.Allreduce(x, out, op=MPI.SUM)
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        comm.Allreduce(x, out, op=MPI.SUM)
    us = comm.allreduce((time.perf_counter() - t0) / iters * 1e6, op=MPI.MAX)
    if comm.Get_rank() == 0:
        print("mpi,%.3f,%d" % (us, np.array_equal(out, x * comm.Get_size())))


# ---- the driver -------------------------------------------------------------

def run_c(ranks, size, iters, warm):
    out = subprocess.run(
        [os.path.join(ROOT, "build/launcher/shmesh-run"), "-n", str(ranks), "--",
         os.path.join(ROOT, "build/tools/shmesh-bench"), "-o", "psum", "-b", str(size), "-e",
         str(size), "-w", str(warm), "-n", str(iters), "-c", "0", "--csv"],
        check=True, stdout=subprocess.PIPE, text=True).stdout
    return float(out.splitlines()[1].split(",")[6])


def run_py(ranks, size, iters, warm):
    out = subprocess.run(
        [os.path.join(ROOT, "build/launcher/shmesh-run"), "-n", str(ranks), "--", sys.executable,
         os.path.abspath(__file__), "--worker", str(size), str(iters), str(warm)],
        check=True, stdout=subprocess.PIPE, text=True).stdout
    for line in out.splitlines():
        if line.startswith("torch,"):
            MOVES.setdefault((size, "torch"), []).append((float(line.split(",")[1]), 0.0))
        if line.startswith("move,"):
            _, name, tc, tp = line.split(",")
            MOVES.setdefault((size, name), []).append((float(tc), float(tp)))
    f = [line for line in out.splitlines() if line.startswith("py,")][0].split(",")
    OUTS.setdefault(size, []).append(float(f[9]))
    return float(f[2]), float(f[3]), f[4] == "1", f[5] == "1", f[6] == "1", float(f[7]), f[8] == "1"


MOVES = {}  # (size, op) -> [(compiled us, general path us)] per round (--moves)
OUTS = {}   # size -> the compiled psum with out=, us per round


def run_mpi(ranks, size, iters, warm):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    out = subprocess.run(
        ["mpirun", "--oversubscribe", "-np", str(ranks), sys.executable,
         os.path.abspath(__file__), "--mpi-worker", str(size), str(iters), str(warm)],
        check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    f = [line for line in out.splitlines() if line.startswith("mpi,")][0].split(",")
    if f[2] != "1":
        sys.exit("python_overhead.py: mpi4py's Allreduce gave a wrong sum")
    return float(f[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("-r", type=int, default=7, help="rounds (default 7)")
    ap.add_argument("-s", default="8,16M", help="sizes in bytes, K/M suffixes (default 8,16M)")
    ap.add_argument("--moves", action="store_true",
                    help="also time all_gather, psum_scatter and all_to_all from Python")
    ap.add_argument("--worker", nargs=3, type=int, help=argparse.SUPPRESS)
    ap.add_argument("--mpi-worker", nargs=3, type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(*a.worker)
        return 0
    if a.mpi_worker:
        mpi_worker(*a.mpi_worker)
        return 0
    try:
        import mpi4py  # noqa: F401
        have_mpi = True
    except ImportError:
        have_mpi = False
        print("# mpi4py: not importable by %s (Debian: python3-mpi4py): left out"
              % sys.executable)
    if a.moves:
        os.environ["PYTHON_OVERHEAD_MOVES"] = "1"
    os.environ.setdefault("SHMESH_LIBRARY", os.path.join(ROOT, "build/lib/libshmesh.so.0"))
    os.environ.setdefault("PYTHONPATH", os.path.join(ROOT, "python"))
    for p in ("build/launcher/shmesh-run", "build/tools/shmesh-bench"):
        if not os.access(os.path.join(ROOT, p), os.X_OK):
            sys.exit("python_overhead.py: build first (./run.sh --build-only): no %s" % p)
    print("# psum of float32, %d ranks, %d rounds (medians of the rounds; each round's time is "
          "the mean per call, the slowest rank's)" % (a.n, a.r))
    print("%10s %8s %9s %9s %9s %9s %9s %8s %10s %9s" % (
        "bytes", "iters", "C_us", "py_us", "general_us", "mpi4py_us", "added_us", "py/mpi4py",
        "py_strided", "copy_us"))
    for size in (parse_size(s) for s in a.s.split(",")):
        iters, warm = iters_for(size)
        cs, ps, ts, ms, vs, checks = [], [], [], [], [], []
        sides = [run_c, run_py] + ([run_mpi] if have_mpi else [])
        for r in range(a.r):
            for f in sides[r % len(sides):] + sides[:r % len(sides)]:
                if f is run_c:
                    cs.append(run_c(a.n, size, iters, warm))
                elif f is run_mpi:
                    ms.append(run_mpi(a.n, size, iters, warm))
                else:
                    t, v, same, copied, ok, tc, _ = run_py(a.n, size, iters, warm)
                    ps.append(t)
                    ts.append(tc)
                    vs.append(v)
                    checks.append((same, copied, ok))
            print("#   round %d, %d B: C %.3f us, Python %.3f us (general %.3f), mpi4py %s, "
                  "strided %.3f us" % (r + 1, size, cs[-1], ps[-1], ts[-1],
                                       "%.3f us" % ms[-1] if ms else "-", vs[-1]),
                  file=sys.stderr)
        med = statistics.median
        c, p, t, v = med(cs), med(ps), med(ts), med(vs)
        m = med(ms) if ms else float("nan")
        print("%10d %8d %9.3f %9.3f %9.3f %9.3f %9.3f %8.2f %10.3f %9.3f"
              % (size, iters, c, p, t, m, p - c, p / m, v, v - p))
        c, p, t = min(cs), min(ps), min(ts)
        m = min(ms) if ms else float("nan")
        print("#   fastest rounds: C %.3f us, Python %.3f us (general %.3f), mpi4py %.3f us, "
              "added %.3f us, py/mpi4py %.2f" % (c, p, t, m, p - c, p / m))
        if ms:
            print("#   with out= (preallocated, as mpi4py's): %.3f us, added %.3f us, "
                  "py/mpi4py %.2f (medians)" % (med(OUTS[size]), med(OUTS[size]) - med(cs),
                                                med(OUTS[size]) / med(ms)))
        for (sz, name), ts in sorted(MOVES.items()):
            if sz == size and name == "torch":
                print("#   psum of a torch tensor: %.3f us (median)" % med([t[0] for t in ts]))
            elif sz == size:
                print("#   %s, tiled, %d B per rank: compiled %.3f us, general path %.3f us (medians)"
                      % (name, size * a.n, med([t[0] for t in ts]), med([t[1] for t in ts])))
        same, copied, ok = (all(x[k] for x in checks) for k in range(3))
        print("#   contiguous input passed in place "
              "(np.shares_memory): %s; strided view copied: %s; results right: %s"
              % ("yes" if same else "NO",
                 "yes" if copied else "NO", "yes" if ok else "NO"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
