"""The trainer of examples/train.c, from Python: linear regression trained
data-parallel over mesh axis "data" and tensor-parallel over "model".

    shmesh-run -n 4 -- python3 examples/train.py [steps]

(with the library and the package found as docs/python.md says, e.g.
SHMESH_LIBRARY=build/lib/libshmesh.so.0 PYTHONPATH=python).

The job's devices (one per rank) form a mesh (data, model) of (devices / 2,
2).  The inputs X (N x F) are split as P('data', 'model') would: each device
holds a block of rows and of features; the targets y (N) by rows as
P('data'); the weights w (F) by features as P('model'), the same on every
"data" index.  Each step, on every device:

    partial = X_blk @ w_blk              its features' share of the prediction
    pred    = psum(partial, "model")     the whole prediction of its rows
    err     = pred - y_blk
    loss    = psum(sum(err**2), "data") / N
    grad    = psum(X_blk.T @ err, "data") * 2 / N
    w_blk  -= lr * grad

Rank 0 prints the loss every few steps; it falls towards the noise's
variance.  At the end the weights are gathered (all_gather over "model") and
compared with the ones the data was made from.  The data is train.c's, from
the same hash, so the losses agree with shmesh-train's to float32 rounding.
"""
import sys

import numpy as np

import shmesh

N = 256  # samples
F = 16   # features


def hash01(x):
    """train.c's hash of element indices to [0, 1), on uint64 arrays."""
    with np.errstate(over="ignore"):
        x = x.astype(np.uint64) + np.uint64(0x9e3779b97f4a7c15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
        x ^= x >> np.uint64(31)
    return (x >> np.uint64(11)).astype(np.float64) / 9007199254740992.0


def x_at(i, j):
    return 2.0 * hash01(np.asarray(i, np.uint64) * np.uint64(F) + np.asarray(j, np.uint64)) - 1.0


def w_true(j):
    j = np.asarray(j)
    return (j % 5) - 2.0 + 0.25 * j / F


def y_at(rows):
    noise = 0.1 * (2.0 * hash01(np.uint64(1000003) + rows.astype(np.uint64)) - 1.0)
    cols = np.arange(F)
    return noise + (x_at(rows[:, None], cols[None, :]) * w_true(cols)).sum(axis=1)


def main(argv):
    steps = int(argv[1]) if len(argv) > 1 else 200
    if steps < 1:
        print("usage: %s [steps >= 1]" % argv[0], file=sys.stderr)
        return 2
    shmesh.init()
    devices, rank = shmesh.device_count(), shmesh.rank()
    if devices % 2 or N % (devices // 2) or devices != shmesh.world_size():
        if rank == 0:
            print("train.py: needs an even number of devices dividing %d, one per rank; got "
                  "%d devices on %d ranks" % (2 * N, devices, shmesh.world_size()),
                  file=sys.stderr)
        return 2
    mesh = shmesh.Mesh(np.arange(devices).reshape(devices // 2, 2), ("data", "model"))
    with mesh:
        # This device's blocks, as P('data', 'model'), P('data'), P('model').
        d, m = int(shmesh.axis_index("data")), int(shmesh.axis_index("model"))
        rows_n, cols_n = N // (devices // 2), F // 2
        rows = np.arange(d * rows_n, (d + 1) * rows_n)
        cols = np.arange(m * cols_n, (m + 1) * cols_n)
        x = x_at(rows[:, None], cols[None, :]).astype(np.float32)
        y = y_at(rows).astype(np.float32)
        w = np.zeros(cols_n, np.float32)
        if rank == 0:
            print("train.py: %d ranks x 1 devices, mesh (data=%d, model=2); X %dx%d split as "
                  "P('data', 'model'): %dx%d blocks" % (shmesh.world_size(), devices // 2, N, F,
                                                        rows_n, cols_n))
        lr = np.float32(0.1)
        every = steps // 10 or 1
        for step in range(steps + 1):
            pred = shmesh.psum(x @ w, "model")
            err = pred - y
            loss = shmesh.psum(np.float32((err * err).sum()), "data")
            grad = shmesh.psum(x.T @ err, "data")
            w -= lr * np.float32(2.0 / N) * grad
            if rank == 0 and (step % every == 0 or step == steps):
                print("step %4d  loss %.6f" % (step, loss / N))
        w_all = shmesh.all_gather(w, "model", tiled=True)
        if rank == 0:
            worst = np.abs(w_all - w_true(np.arange(F))).max()
            print("largest weight error %.4f against the weights the data was made from" % worst)
    mesh.close()
    shmesh.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
