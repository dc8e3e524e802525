"""A job that fails on purpose, run by test_jobs.py under its own shmesh-run:

    shmesh-run -n N -- python3 jobs.py MODE

mismatch: rank r calls psum with r + 1 elements;
peerdead: the last rank exits (status 5) without finalize, the others psum;
timeout:  (SHMESH_TIMEOUT=1) the last rank sleeps 3 s, the others psum;
abort:    the last rank calls shmesh_abort (status 7), the others psum.
Each rank that gets an error prints "rank R: CLASS: MESSAGE" and exits 0
(after trying a second call, which must fail alike: the context is poisoned)."""
import sys
import time

import numpy as np

import shmesh


def main(mode):
    r, n = shmesh.rank(), shmesh.world_size()
    mesh = shmesh.Mesh(np.arange(n), "i")
    shmesh.psum(np.ones(2), "i", mesh=mesh)  # everyone is up
    last = r == n - 1
    x = np.ones(2)
    if mode == "mismatch":
        x = np.ones(r + 1)
    elif mode == "peerdead" and last:
        sys.stdout.flush()
        import os
        os._exit(5)
    elif mode == "timeout" and last:
        time.sleep(3)
    elif mode == "abort" and last:
        shmesh._lib.lib.shmesh_abort.argtypes = [shmesh._lib.P, shmesh._lib.I,
                                                 shmesh._lib.S]
        shmesh._lib.lib.shmesh_abort(shmesh._ctx, 7, b"jobs.py gives up")
    try:
        shmesh.psum(x, "i", mesh=mesh)
        print("rank %d: no error" % r, flush=True)
        return 1
    except shmesh.Error as e:
        print("rank %d: %s: %s" % (r, type(e).__name__, e), flush=True)
        first = type(e)
    try:
        shmesh.barrier()
        print("rank %d: the second call worked" % r, flush=True)
    except shmesh.Error as e:
        print("rank %d: again %s" % (r, type(e).__name__), flush=True)
        assert type(e) is first or mode == "timeout", (type(e), first)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
