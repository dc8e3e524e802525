#!/usr/bin/python3
"""python_paths.py: the per-call time of the Python binding's paths.

    shmesh-run -n 2 -- /usr/bin/python3 bench/python_paths.py [ITERS]

Times 8-byte calls through each way a call can go: the compiled
callables' fast path (psum, all_gather, ppermute of one numpy array and one
axis name) and the general path (python/shmesh/_collectives.py's _leaf:
axis_index_groups, a tuple of axis names, an _async form and its wait, a
pytree of four leaves).  Each case: 200 calls of warm-up, a barrier, then
ITERS calls (default 3000); it prints the mean per call in microseconds,
the slowest rank's, one line of name=value for rank 0.  With
--devices-per-rank K the arrays carry one entry per local device.  Launch
it a few times, alternating with another tree's to compare (docs/python.md
has figures).
"""
import os
import sys
import time

import numpy as np

import shmesh


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    shmesh.init()
    k = shmesh._context._local_devices
    n = int(os.environ.get("WORLD_SIZE", "1")) * k
    mesh = shmesh.Mesh(np.arange(n), ("i",))
    x = np.ones((k, 2) if k > 1 else 2, np.float32)
    groups = [list(range(n))]
    ring = [(j, (j + 1) % n) for j in range(n)]
    cases = {
        "psum": lambda: shmesh.psum(x, "i", mesh=mesh),
        "psum_groups": lambda: shmesh.psum(x, "i", mesh=mesh, axis_index_groups=groups),
        "psum_tuple": lambda: shmesh.psum(x, ("i",), mesh=mesh),
        "psum_async_wait": lambda: shmesh.psum_async(x, "i", mesh=mesh).block_until_ready(),
        "all_gather": lambda: shmesh.all_gather(x, "i", mesh=mesh),
        "all_gather_groups": lambda: shmesh.all_gather(x, "i", mesh=mesh,
                                                       axis_index_groups=groups),
        "ppermute": lambda: shmesh.ppermute(x, "i", ring, mesh=mesh),
        "pytree4": lambda: shmesh.psum([x, x, x, x], "i", mesh=mesh),
    }
    res = {}
    for name, f in cases.items():
        for _ in range(200):
            f()
        shmesh.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            f()
        us = (time.perf_counter() - t0) / iters * 1e6
        t = np.full((k,) if k > 1 else (), us)  # one entry per local device
        res[name] = float(np.max(shmesh.pmax(t, "i", mesh=mesh)))
    if shmesh.rank() == 0:
        print(" ".join("%s=%.2f" % kv for kv in res.items()))
    mesh.close()
    shmesh.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
