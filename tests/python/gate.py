"""A gate between the ranks of a job, for tests where a rank must stay out
of a call until others have done something: the others open it (a file in
the directory $SHMESH_TEST_GATE, which whoever starts the job makes and
removes), the rank waits for it.  An event, not a sleep: a busy machine may
delay any rank by a second or more."""
import os
import time


def _path(name):
    d = os.environ.get("SHMESH_TEST_GATE")
    if not d:
        raise RuntimeError("SHMESH_TEST_GATE is not set: no directory for the gate %r" % name)
    return os.path.join(d, name)


def open_gate(name):
    with open(_path(name), "w"):
        pass


def wait_gate(*names, limit=60.0):
    """Until every named gate is open; TimeoutError after `limit` seconds."""
    t0 = time.monotonic()
    while not all(os.path.exists(_path(n)) for n in names):
        if time.monotonic() - t0 > limit:
            raise TimeoutError("the gates %s were not all opened within %g s" % (names, limit))
        time.sleep(0.005)
