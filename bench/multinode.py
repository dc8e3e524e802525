#!/usr/bin/python3
"""multinode.py: a job of simulated nodes against MPI over the same processes.

    bench/multinode.py [-n RANKS] [-k RANKS_PER_NODE] [-r ROUNDS] [-o OPS]
                       [-b BYTES] [-e BYTES] [-f FACTOR] [-B BUILD]

Runs, alternating, for ROUNDS rounds: shmesh-bench under
`SHMESH_NODE_SIZE=K mpirun -np N` (N / K simulated nodes of K ranks, every
group spanning them: docs/multinode.md), with --nodes, and Open MPI's own
collective (bench/mpi_bench.c) under `mpirun -np N`, for psum / allreduce,
all_gather / allgather and all_to_all / alltoall.  Prints per op and size the
medians over rounds: each side's time, x = Open MPI's time / shmesh's (> 1:
shmesh faster), and the bytes of data a rank sent to other nodes per call
(shmesh_traffic_nodes_get, the most of any rank) beside the least any
algorithm must send:

    psum        2 (n - 1) / n * S / L   (n nodes of L ranks, S the array;
                                         reduce inside the node first)
    all_gather  (n - 1) * S / (n L)     (S the output: each rank's input
                                         reaches every other node once)
    all_to_all  (n - 1) / n * S         (S the input: what is meant for the
                                         other nodes)

The caller's SHMESH_* variables reach the ranks (SHMESH_NET_HIERARCHICAL=1:
the reductions that send across nodes only each node's partial result).
On one machine the "nodes" talk through Open MPI's shared memory: the times
say nothing of real network links, only the bytes carry over.  Installs
nothing: needs mpirun.openmpi and mpicc.openmpi (Debian: openmpi-bin,
libopenmpi-dev) and a build with the MPI plugin (./run.sh --build-only).
As root, Open MPI's two OMPI_ALLOW_RUN_AS_ROOT variables are set here.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys

PAIRS = {"psum": "allreduce", "all_gather": "allgather", "all_to_all": "alltoall"}


def size_arg(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    return int(t[:-1]) * mult[t[-1]] if t and t[-1] in mult else int(t)


def least(op, size, nodes, per):
    n, ranks = nodes, nodes * per
    if op == "psum":
        return 2 * (n - 1) / n * size / per
    if op == "all_gather":
        return (n - 1) * size / ranks
    return (n - 1) / n * size


def run(cmd, env, timeout):
    e = dict(os.environ, **env)
    p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    if p.returncode:
        sys.exit("multinode.py: %s failed (%d):\n%s" % (" ".join(cmd), p.returncode,
                                                         p.stdout[-3000:]))
    return [l.split(",") for l in p.stdout.splitlines() if l[:1].isalpha() and "," in l
            and not l.startswith("op,")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=4, help="ranks (default 4)")
    ap.add_argument("-k", type=int, default=2, help="ranks per simulated node (default 2)")
    ap.add_argument("-r", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("-o", default="psum,all_gather,all_to_all", help="ops (shmesh names)")
    ap.add_argument("-b", type=size_arg, default=8, help="smallest size (default 8)")
    ap.add_argument("-e", type=size_arg, default=64 << 20, help="largest size (default 64M)")
    ap.add_argument("-f", type=int, default=8, help="size factor (default 8)")
    ap.add_argument("-B", default="build", help="the build folder (default build)")
    a = ap.parse_args()
    if a.n % a.k:
        sys.exit("multinode.py: -n %d is not a multiple of -k %d" % (a.n, a.k))
    mpirun, mpicc = shutil.which("mpirun.openmpi"), shutil.which("mpicc.openmpi")
    if not mpirun:
        sys.exit("multinode.py: no mpirun.openmpi (Debian: openmpi-bin)")
    bench = os.path.join(a.B, "tools", "shmesh-bench")
    plugin = os.path.join(a.B, "lib", "net", "libshmesh-net-mpi.so")
    for need in (bench, plugin):
        if not os.path.exists(need):
            sys.exit("multinode.py: %s is missing (./run.sh --build-only, with libopenmpi-dev)"
                     % need)
    mpi_bench = os.path.join(a.B, "bench-mpi", "mpi_bench-openmpi")
    if not os.path.exists(mpi_bench):
        if not mpicc:
            sys.exit("multinode.py: no mpicc.openmpi to build %s (libopenmpi-dev)" % mpi_bench)
        os.makedirs(os.path.dirname(mpi_bench), exist_ok=True)
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_bench.c")
        subprocess.run([mpicc, "-O2", "-o", mpi_bench, src, "-lm"], check=True)
    os.environ.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    mpi = [mpirun, "--oversubscribe", "--mca", "btl", "self,vader", "-np", str(a.n)]
    ops = a.o.split(",")
    sizes = []
    s = a.b
    while s <= a.e:
        sizes.append(s)
        s *= a.f
    nodes = a.n // a.k
    print("multinode.py: %d ranks as %d simulated nodes of %d, %d rounds, float32, sizes %s"
          % (a.n, nodes, a.k, a.r, " ".join(map(str, sizes))))
    times = {}  # (side, op, size) -> [us]
    xnode = {}  # (op, size) -> [bytes]
    for rnd in range(a.r):
        for op in ops:
            for size in sizes:
                it = ["-w", "10", "-n", "100"] if size <= 64 << 10 else \
                    ["-w", "2", "-n", "10"] if size <= 4 << 20 else ["-w", "1", "-n", "3"]
                common = ["-b", str(size), "-e", str(size), "-d", "float32", "-c", "0",
                          "--csv"] + it
                env = {"SHMESH_NODE_SIZE": str(a.k)}
                # the ranks get SHMESH_NODE_SIZE and the caller's SHMESH_* settings
                xs = [x for v in sorted(set(os.environ) | set(env)) if v.startswith("SHMESH_")
                      for x in ("-x", v)]
                rows = run(mpi + xs + [bench, "-o", op, "--nodes"] + common, env, 600)
                for r in rows:
                    times.setdefault(("shmesh", op, size), []).append(float(r[6]))
                    xnode.setdefault((op, size), []).append(float(r[10]))
                rows = run(mpi + [mpi_bench, "-o", PAIRS[op]] + common, {}, 600)
                for r in rows:
                    times.setdefault(("openmpi", op, size), []).append(float(r[6]))
        print("multinode.py: round %d of %d done" % (rnd + 1, a.r), file=sys.stderr)
    print("%-10s %10s %12s %12s %6s %12s %12s %6s" % ("op", "size", "shmesh_us", "openmpi_us",
                                                       "x", "xnode_B", "least_B", "ratio"))
    for op in ops:
        for size in sizes:
            sh = statistics.median(times[("shmesh", op, size)])
            om = statistics.median(times[("openmpi", op, size)])
            xb = statistics.median(xnode[(op, size)])
            lb = least(op, size, nodes, a.k)
            print("%-10s %10d %12.2f %12.2f %6.2f %12.0f %12.0f %6.2f"
                  % (op, size, sh, om, om / sh if sh else 0, xb, lb, xb / lb if lb else 0))


if __name__ == "__main__":
    main()
