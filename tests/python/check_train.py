"""The example-train-py test: examples/train.py learns, as shmesh-train does.

    check_train.py SHMESH_RUN PYTHON TRAIN_PY SHMESH_TRAIN

runs both trainers for 100 steps on 4 ranks (the environment giving
SHMESH_LIBRARY and PYTHONPATH) and fails unless the Python one prints 11
loss lines, the loss falls at each and by more than 100 times in all, and
each loss is the C trainer's to float32 rounding (relative 1e-3: the same
data and steps, sums in another order)."""
import re
import subprocess
import sys


def losses(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=120)
    if p.returncode:
        sys.exit("%s: exit status %d:\n%s" % (" ".join(cmd), p.returncode, p.stdout))
    return [float(v) for v in re.findall(r"^step +\d+  loss ([0-9.eE+-]+)$", p.stdout, re.M)], \
        p.stdout


def main(argv):
    launcher, python, train_py, train_c = argv[1:5]
    run = [launcher, "-n", "4", "--gpus", "none", "--timeout", "100", "--"]
    lp, out = losses(run + [python, train_py, "100"])
    lc, _ = losses(run + [train_c, "100"])
    print(out, end="")
    if len(lp) != 11:
        sys.exit("expected 11 loss lines, found %d" % len(lp))
    for i in range(1, len(lp)):
        if not lp[i] < lp[i - 1]:
            sys.exit("the loss went up at line %d" % i)
    if not lp[-1] < lp[0] / 100:
        sys.exit("the loss fell only from %g to %g" % (lp[0], lp[-1]))
    if len(lc) != len(lp) or any(abs(a - b) > 1e-3 * b + 1e-6 for a, b in zip(lp, lc)):
        sys.exit("the losses differ from shmesh-train's: Python %s, C %s" % (lp, lc))
    print("the loss fell from %g to %g, as shmesh-train's" % (lp[0], lp[-1]))


if __name__ == "__main__":
    main(sys.argv)
