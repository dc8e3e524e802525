"""The order of a psum across nodes (tests/check_mpi.py; docs/multinode.md).

Under SHMESH_NODE_SIZE=K mpirun -np N, every rank sums the same random
float32 arrays of every rank (values over several magnitudes, so that the
order of the additions shows in the bits), of 1000 and of 300000 elements
(above SHMESH_RSAG_MIN), and prints per size whether its result has the
bits of the documented order, and whether that order differs from the
other one for these data:
  SHMESH_NET_HIERARCHICAL=0: rank 0's + rank 1's + ... in rank order, as on
  one node;
  SHMESH_NET_HIERARCHICAL=1: each node's ranks in rank order, then the
  nodes' sums in node order (nodes of K consecutive ranks, or with
  SHMESH_NODE_CYCLIC=1 rank q on node q mod the number of nodes).
"""
import os
import numpy as np
import shmesh
shmesh.init()
r, n = shmesh.rank(), shmesh.world_size()
k = int(os.environ["SHMESH_NODE_SIZE"])
hier = os.environ.get("SHMESH_NET_HIERARCHICAL", "0") == "1"
cyclic = os.environ.get("SHMESH_NODE_CYCLIC", "0") == "1"
m = shmesh.Mesh(np.arange(n), ("i",))
lines = []
for size in (1000, 300000):
    xs = [(np.random.default_rng(q).standard_normal(size) *
           10.0 ** np.random.default_rng(q + 99).integers(-3, 4, size)).astype(np.float32)
          for q in range(n)]
    got = shmesh.psum(xs[r], "i", mesh=m)
    flat = xs[0].copy()
    for x in xs[1:]:
        flat += x
    nodes_n = -(-n // k)
    on = [[q for q in range(n) if (q % nodes_n if cyclic else q // k) == d]
          for d in range(nodes_n)]
    parts = []
    for members in on:  # each node's ranks in rank order, then the nodes in order
        p = xs[members[0]].copy()
        for q in members[1:]:
            p += xs[q]
        parts.append(p)
    nodes = parts[0].copy()
    for p in parts[1:]:
        nodes += p
    want = nodes if hier else flat
    lines.append("%d %s %s" % (size, got.tobytes() == want.tobytes(),
                               nodes.tobytes() != flat.tobytes()))
os.write(1, ("rank %d: %s\n" % (r, "; ".join(lines))).encode())
m.close()
shmesh.finalize()
