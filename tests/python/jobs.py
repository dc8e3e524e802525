"""A job that fails on purpose, run by test_jobs.py under its own shmesh-run:

    shmesh-run -n N -- python3 jobs.py MODE

mismatch: rank r calls psum with r + 1 elements;
peerdead: the last rank exits (status 5) without finalize, the others psum;
timeout:  (SHMESH_TIMEOUT=T) the last rank stays out of the psum the
          others call until rank 0 got its Timeout;
abort:    the last rank calls shmesh.abort (status 7), the others psum.
asyncpeerdead: the last rank exits (status 5) without finalize once the
          others dispatched a psum_async, which they wait for.
asyncfinalize: every rank dispatches async work and a callback, then
          finalizes without waiting: finalize drains it (prints "drained").
asyncdevices: (--devices-per-rank 2) the async ops against the blocking ones
          with a leading axis of one entry per device (prints "devices ok").
forkcall: rank 0 forks (with async work in flight); the child's calls on the
          inherited context are refused, its exit runs no finalize; then
          every rank's psum is right (prints "fork ok").
forkexit: the same, the child only exits (sys.exit(0): atexit runs).
raise:    the last rank raises ZeroDivisionError; the others psum, uncaught.
exit3:    the last rank calls sys.exit(3); the others psum, uncaught.
threads:  a second thread calls psum while the main thread runs its own: all
          of its calls are refused, every result of the main thread is right
          (prints "threads ok").
Each rank that gets an error prints "rank R: CLASS: MESSAGE" and exits 0
(after trying a second call, which must fail alike: the context is poisoned).
Where a rank must stay out until the others did something, it waits at a
gate (gate.py, in $SHMESH_TEST_GATE), not for a time."""
import os
import sys
import threading
import time

import numpy as np

import shmesh
from gate import open_gate, wait_gate


def drained(r, n):
    mesh = shmesh.Mesh(np.arange(n), "i")
    ps = [shmesh.psum_async(np.full(3, r + i), "i", mesh=mesh) for i in range(5)]
    ran = []
    t = shmesh.callback(lambda dev: ran.append(dev), placement="self")
    shmesh.finalize()
    assert t.is_ready() and ran == [r], ran  # the token of a finalized context stays done
    for i, p in enumerate(ps):
        got = p.block_until_ready()
        assert (got == sum(range(n)) + n * i).all(), (i, got)
    print("rank %d: drained" % r, flush=True)
    return 0


def devices(r, n):
    k = shmesh._context._local_devices
    mesh = shmesh.Mesh(np.arange(shmesh.device_count()), "i")
    x = np.arange(k * 6, dtype=np.float32).reshape(k, 2, 3) + 10 * r
    for name, args in (("psum", ()), ("all_gather", ()), ("pbroadcast", (1,)),
                       ("ppermute", ([(0, 1), (1, 0)],))):
        want = getattr(shmesh, name)(x, "i", *args, mesh=mesh)
        got = getattr(shmesh, name + "_async")(x, "i", *args, mesh=mesh).block_until_ready()
        assert got.shape == want.shape and (got == want).all(), (name, got, want)
    seen = []
    shmesh.callback(lambda dev: seen.append(dev)).wait()
    assert seen == mesh.local_devices, (seen, mesh.local_devices)
    print("rank %d: devices ok" % r, flush=True)
    return 0


def forked(r, n, child_calls):
    mesh = shmesh.Mesh(np.arange(n), "i")
    shmesh.psum(np.ones(2), "i", mesh=mesh)
    p = shmesh.psum_async(np.full(2, r), "i", mesh=mesh)  # the progress thread runs
    if r == 0:
        pid = os.fork()
        if pid == 0:
            if child_calls:
                for what, fn in (("psum", lambda: shmesh.psum(np.ones(2), "i", mesh=mesh)),
                                 ("barrier", shmesh.barrier),
                                 ("finalize", shmesh.finalize)):
                    try:
                        fn()
                        print("child: %s worked" % what, flush=True)
                    except shmesh.InvalidArgument as e:
                        print("child: %s: InvalidArgument: %s" % (what, e), flush=True)
                try:
                    got = p.block_until_ready()
                    print("child: wait: %s" % ("right result" if (got == sum(range(n))).all()
                                               else "wrong result %s" % got), flush=True)
                except shmesh.InvalidArgument as e:
                    print("child: wait: InvalidArgument: %s" % e, flush=True)
            sys.exit(0)  # atexit's handlers run
        _, status = os.waitpid(pid, 0)
        print("rank 0: child exited with status %d" % os.waitstatus_to_exitcode(status),
              flush=True)
    got = p.block_until_ready()
    assert (got == sum(range(n))).all(), got
    for i in range(3):
        got = shmesh.psum(np.full(2, 10 * i + r), "i", mesh=mesh)
        assert (got == sum(10 * i + q for q in range(n))).all(), (i, got)
    print("rank %d: fork ok" % r, flush=True)
    return 0


def threads(r, n):
    """The main thread holds the context; a second one calls meanwhile."""
    mesh = shmesh.Mesh(np.arange(n), "i")
    shmesh.psum(np.ones(2), "i", mesh=mesh)
    done = threading.Event()
    seen = {"refused": 0, "ran": 0}

    def other():
        while not done.is_set():
            try:
                shmesh.psum(np.full(2, 1000 + r), "i", mesh=mesh)
                seen["ran"] += 1
            except shmesh.InvalidArgument:
                seen["refused"] += 1
            time.sleep(0.0005)
    t = threading.Thread(target=other)
    t.start()
    wrong = 0
    try:
        for i in range(300):
            got = shmesh.psum(np.full(2, 10 * i + r), "i", mesh=mesh)
            wrong += not (got == sum(10 * i + q for q in range(n))).all()
            if i % 50 == 0:
                time.sleep(0.01)  # let the other thread in
    finally:
        done.set()
        t.join()
    print("rank %d: threads: %d wrong, %d of the other thread's calls ran, %d refused"
          % (r, wrong, seen["ran"], seen["refused"]), flush=True)
    if not wrong and not seen["ran"] and seen["refused"]:
        print("rank %d: threads ok" % r, flush=True)
    return 0


def main(mode):
    r, n = shmesh.rank(), shmesh.world_size()
    if mode == "asyncfinalize":
        return drained(r, n)
    if mode == "asyncdevices":
        return devices(r, n)
    if mode in ("forkcall", "forkexit"):
        return forked(r, n, mode == "forkcall")
    if mode == "threads":
        return threads(r, n)
    mesh = shmesh.Mesh(np.arange(n), "i")
    shmesh.psum(np.ones(2), "i", mesh=mesh)  # everyone is up
    last = r == n - 1
    x = np.ones(2)
    if mode == "mismatch":
        x = np.ones(r + 1)
    elif mode == "peerdead" and last:
        sys.stdout.flush()
        os._exit(5)
    elif mode == "asyncpeerdead" and last:
        # the others' psum_async is dispatched, and waited for
        wait_gate(*("dispatched-%d" % q for q in range(n - 1)))
        sys.stdout.flush()
        os._exit(5)
    elif mode == "timeout" and last:
        wait_gate("timed-out")  # out of any call until rank 0's psum gave up
    elif mode == "raise" and last:
        raise ZeroDivisionError("jobs.py divides by zero")
    elif mode == "exit3" and last:
        sys.exit(3)
    elif mode == "abort" and last:
        print("rank %d: aborting" % r, flush=True)
        shmesh.abort(7, "jobs.py gives up")
        print("rank %d: abort returned" % r, flush=True)  # must not be reached
    if mode in ("raise", "exit3"):
        time.sleep(0.2)  # the last rank fails first
        shmesh.psum(x, "i", mesh=mesh)  # uncaught
        print("rank %d: no error" % r, flush=True)
        return 1
    try:
        if mode == "asyncpeerdead":
            p = shmesh.psum_async(x, "i", mesh=mesh)  # dispatched: the error comes from wait
            print("rank %d: dispatched" % r, flush=True)
            open_gate("dispatched-%d" % r)
            p.token.wait()
        else:
            shmesh.psum(x, "i", mesh=mesh)
        print("rank %d: no error" % r, flush=True)
        return 1
    except shmesh.Error as e:
        print("rank %d: %s: %s" % (r, type(e).__name__, e), flush=True)
        first = type(e)
        if mode == "timeout" and r == 0:
            open_gate("timed-out")
    try:
        shmesh.barrier()
        print("rank %d: the second call worked" % r, flush=True)
    except shmesh.Error as e:
        print("rank %d: again %s" % (r, type(e).__name__), flush=True)
        assert type(e) is first or mode == "timeout", (type(e), first)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
