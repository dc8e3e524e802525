#!/usr/bin/env python3
"""The Python package's device path on a GPU runtime (tools/gpu-check.sh's
last step; over the fake runtime in CI's python-device test instead):

    shmesh-run -n N -- PYTHON tools/gpu_dlpack_check.py

Each rank copies arrays into device memory (shmesh.device_array), runs
psum, all_gather (tiled) and pbroadcast on them (DLPack device tensors go
to the library's device path), copies the results home and checks them
against numpy; then, where they import and see a GPU, the same psum on a
torch CUDA tensor and on a JAX GPU array, whose results must come back as
their own kind.  Prints one line per check; exit 1 on a wrong result."""
import sys

import numpy as np

import shmesh


def main():
    shmesh.init()
    rank, world = shmesh.rank(), shmesh.world_size()
    mesh = shmesh.Mesh(np.arange(world), ("i",))
    xs = [np.arange(1 << 16, dtype=np.float32) * (r + 1) for r in range(world)]
    bad = 0

    def check(what, got, want):
        nonlocal bad
        ok = got.shape == want.shape and got.dtype == want.dtype and np.array_equal(got, want)
        bad += not ok
        if rank == 0 or not ok:
            print("rank %d: %s: %s" % (rank, what, "ok" if ok else "WRONG"), flush=True)

    d = shmesh.device_array(xs[rank])
    check("psum of a device array", shmesh.psum(d, "i", mesh=mesh).numpy(), sum(xs))
    check("all_gather (tiled)", shmesh.all_gather(d, "i", mesh=mesh, tiled=True).numpy(),
          np.concatenate(xs))
    check("pbroadcast from the last", shmesh.pbroadcast(d, "i", world - 1, mesh=mesh).numpy(),
          xs[world - 1])
    try:
        import torch
        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    if cuda:
        t = torch.from_numpy(xs[rank]).cuda()
        r = shmesh.psum(t, "i", mesh=mesh)
        check("psum of a torch CUDA tensor (a %s back)" % type(r).__name__,
              r.cpu().numpy(), sum(xs))
    elif rank == 0:
        print("rank 0: torch with CUDA: not here, left out", flush=True)
    try:
        import jax
        gpus = [dv for dv in jax.devices() if dv.platform == "gpu"]
    except Exception:  # not installed, or no backend
        gpus = []
    if gpus:
        a = jax.device_put(xs[rank], gpus[0])
        r = shmesh.psum(a, "i", mesh=mesh)
        host = r.numpy() if isinstance(r, shmesh.DeviceArray) else np.asarray(r)
        check("psum of a JAX GPU array (a %s back)" % type(r).__name__, host, sum(xs))
    elif rank == 0:
        print("rank 0: JAX on a GPU: not here, left out", flush=True)
    shmesh.finalize()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
