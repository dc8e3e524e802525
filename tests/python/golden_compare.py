"""The golden-python test: the golden cases replayed from Python must come
out as they do from C, case by case.

    golden_compare.py SHMESH_RUN C_READER PYTHON GOLDEN_PY FILE

runs `SHMESH_RUN -n 8 -- C_READER FILE` and `SHMESH_RUN -n 8 -- PYTHON
GOLDEN_PY FILE` (the environment giving SHMESH_LIBRARY and PYTHONPATH),
reads each one's summary line and the cases it lists (FAIL, known
difference, skipped), and fails unless the Python run failed no case, both
summaries give the same counts, and both list the same cases the same way.
Every case the C reader passes must then pass from Python too."""
import re
import subprocess
import sys

SUMMARY = re.compile(r": (\d+) cases: (\d+) passed, (\d+) failed, (\d+) known differences "
                     r"\((\d+) NaN in pmax/pmin/pargmax/pargmin, (\d+) NaN sums with other bits\)"
                     r", (\d+) skipped")
LISTED = re.compile(r"^(FAIL|known difference:|skipped:) case (\d+) ")


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=240)
    summary, listed = None, {}
    for line in p.stdout.splitlines():
        m = SUMMARY.search(line)
        if m:
            summary = tuple(int(g) for g in m.groups())
        m = LISTED.match(line)
        if m:
            listed[int(m.group(2))] = m.group(1)
    return p, summary, listed


def main(argv):
    if len(argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    launcher, reader, python, script, path = argv[1:]
    names = ("cases", "passed", "failed", "known", "known NaN extreme", "known NaN sums",
             "skipped")
    pc, sc, lc = run([launcher, "-n", "8", "--timeout", "120", "--", reader, path])
    pp, sp, lp = run([launcher, "-n", "8", "--timeout", "120", "--", python, script, path])
    for what, p, s in (("C reader", pc, sc), ("Python replay", pp, sp)):
        if s is None:
            print("%s gave no summary line (exit status %d); its output:\n%s"
                  % (what, p.returncode, p.stdout[-6000:]))
            return 1
    print("C:      " + ", ".join("%d %s" % kv[::-1] for kv in zip(names, sc)))
    print("Python: " + ", ".join("%d %s" % kv[::-1] for kv in zip(names, sp)))
    bad = []
    if sp[2] or pp.returncode:
        bad.append("the Python replay failed %d cases (exit status %d)" % (sp[2], pp.returncode))
    if sp != sc:
        bad.append("the counts differ")
    for cid in sorted(set(lc) | set(lp)):
        if lc.get(cid) != lp.get(cid):
            bad.append("case %d: C %s, Python %s" % (cid, lc.get(cid, "passed"),
                                                     lp.get(cid, "passed")))
    if bad:
        print("\n".join(bad[:50]))
        print("Python output (end):\n" + pp.stdout[-4000:])
        return 1
    print("%d passed from Python, as from C" % sp[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
