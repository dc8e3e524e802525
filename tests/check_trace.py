#!/usr/bin/env python3
"""Runs a job under shmesh-run --trace and checks the Chrome trace it wrote.

Usage: check_trace.py [options] SHMESH_RUN PROGRAM [ARGS...]

  --ranks N         ranks of the job (default 4)
  --expect ok|die|flood|hang|refused
                    ok: the launcher exits 0, every call the program says it
                    made ("...: rank R calls N" on stdout) is in the trace once,
                    no event was lost; die: the launcher exits non-zero, the
                    trace still parses, holds every call the ranks said they
                    finished, and an unfinished call on --dead-rank's track;
                    flood: events were lost, the launcher says so, and the
                    counts in otherData add up with what is in the trace;
                    hang: the launcher exits non-zero (--timeout or --signal
                    ended the job) and every rank has an unfinished call;
                    refused: the launcher exits 2 before starting anything,
                    saying what --stderr matches
  --dead-rank R     the rank that dies (die; default 2)
  --trace-events N  passed to shmesh-run
  --env VAR=VALUE   set for the job (repeatable)
  --timeout SECS    shmesh-run --timeout (default 60)
  --signal SECS     send SIGTERM to shmesh-run SECS after every rank said how
                    many calls it made (60 s at most: a busy machine may take
                    seconds to start the ranks)
  --launcher-arg A  one more option for shmesh-run (repeatable)
  --trace-path P    the trace file (default: a temporary file)
  --stderr REGEX    refused: what shmesh-run must say
  --ops A,B,...     the ops the program counts in what it says (default: all);
                    the trace may hold others (the library's own calls)

Always: the JSON parses; one track per rank; every call slice appears once
per rank and call number; each wait lies inside a call slice of its own
track; flows have one start and one finish, on different ranks, in order in
time, each inside a slice of the same op and call number; each rank's byte
counter never decreases and ends at the sum of its calls' bytes, and its
traffic counter at the sum of their sent and received bytes; when the job
ended well and nothing was lost, what its calls sent between processes
equals what they received.

Python's standard library only; exits 0 when everything holds, else 1 with
every failure listed.
"""
import argparse
import collections
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

failures = []


def fail(msg):
    failures.append(msg)


def ns(us):
    """The trace's microseconds (three decimals) as integer nanoseconds."""
    return int(round(float(us) * 1000))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--expect", choices=["ok", "die", "flood", "hang", "refused"],
                    default="ok")
    ap.add_argument("--dead-rank", type=int, default=2)
    ap.add_argument("--trace-events")
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--ops")
    ap.add_argument("--timeout", default="60")
    ap.add_argument("--signal", type=float)
    ap.add_argument("--launcher-arg", action="append", default=[])
    ap.add_argument("--trace-path")
    ap.add_argument("--stderr")
    ap.add_argument("--html", help="shmesh-trace-html: draw the trace and check the page")
    ap.add_argument("--calls-numbered", action="store_true",
                    help="the program numbers its calls 0 .. N-1 and starts them 10 us apart "
                         "(trace_fake): every call slice's number lies there, and any two "
                         "of a rank's slices start their numbers' difference x 10 us apart")
    ap.add_argument("launcher")
    ap.add_argument("program", nargs=argparse.REMAINDER)
    a = ap.parse_args()

    if a.trace_path:
        path = a.trace_path
    else:
        fd, path = tempfile.mkstemp(prefix="shmesh-trace-", suffix=".json")
        os.close(fd)
    try:
        run(a, path)
    finally:
        if not a.trace_path:
            os.unlink(path)
    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print("trace ok")
    return 0


def run(a, path):
    cmd = [a.launcher, "-n", str(a.ranks), "--timeout", a.timeout, "--grace", "2",
           "--trace", path] + a.launcher_arg
    if a.trace_events:
        cmd += ["--trace-events", a.trace_events]
    cmd += ["--"] + a.program
    env = dict(os.environ)
    for kv in a.env:
        k, _, v = kv.partition("=")
        env[k] = v
    # Output to files: --signal reads stdout while the job runs.
    with tempfile.TemporaryFile("w+") as fout, tempfile.TemporaryFile("w+") as ferr:
        p = subprocess.Popen(cmd, stdout=fout, stderr=ferr, text=True, env=env)
        if a.signal is not None:
            # The ranks are all inside their last call once each has said
            # how many it made: then the signal, not after a fixed time.
            t0 = time.monotonic()
            while p.poll() is None and time.monotonic() - t0 < 60:
                fout.seek(0)
                if len(set(re.findall(r"rank (\d+) calls \d+", fout.read()))) >= a.ranks:
                    break
                time.sleep(0.02)
            try:
                p.wait(timeout=a.signal)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGTERM)
        p.wait(timeout=120)
        fout.seek(0)
        ferr.seek(0)
        p.stdout, p.stderr = fout.read(), ferr.read()
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    print("launcher exit status", p.returncode)
    if a.expect == "refused":
        if p.returncode != 2:
            fail("expected exit status 2 (a usage error), found %d" % p.returncode)
        if not re.search(a.stderr or ".", p.stderr):
            fail("expected stderr to match %r" % a.stderr)
        if p.stdout:
            fail("expected no rank to start, found output %r" % p.stdout[:200])
        return
    if a.expect in ("die", "hang"):
        if p.returncode == 0:
            fail("expected the launcher to fail (%s), found exit status 0" % a.expect)
    elif p.returncode != 0:
        fail("expected the launcher to exit 0, found %d" % p.returncode)
    said = {}
    for m in re.finditer(r"rank (\d+) calls (\d+)", p.stdout):
        said[int(m.group(1))] = int(m.group(2))
    if not re.search(r"trace of \d+ calls on %d ranks? written to " % a.ranks, p.stderr):
        fail("expected 'trace of N calls on %d ranks written to FILE' on stderr" % a.ranks)
    lost_said = "were lost" in p.stderr

    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail("the trace does not parse as JSON: %s" % e)
        return
    check(a, doc, said, lost_said)
    if a.html:
        check_html(a.html, path, doc)


def check_html(tool, path, doc):
    """The offline picture: one rect with a tooltip per slice, a track name
    per rank, one arrow per step of each flow."""
    out = path + ".html"
    try:
        p = subprocess.run([sys.executable, tool, path, "-o", out], capture_output=True,
                           text=True, timeout=60)
        if p.returncode != 0:
            fail("shmesh-trace-html failed (%d): %s" % (p.returncode, p.stderr))
            return
        with open(out) as f:
            page = f.read()
    finally:
        if os.path.exists(out):
            os.unlink(out)
    events = doc["traceEvents"]
    slices = [e for e in events if e.get("ph") == "X"]
    want = min(len(slices), 3000)
    got = len(re.findall(r"<rect [^>]*><title>", page))
    if got != want:
        fail("expected the page to draw %d slices, found %d" % (want, got))
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            if ">%s</text>" % e["args"]["name"] not in page:
                fail("expected the page to name the track %r" % e["args"]["name"])
    steps = collections.Counter(e["id"] for e in events if e.get("ph") in ("s", "t", "f"))
    arrows = len(re.findall(r'marker-end="url\(#arrow\)"', page))
    if len(slices) <= 3000 and arrows != sum(n - 1 for n in steps.values()):
        fail("expected %d flow arrows, found %d" % (sum(n - 1 for n in steps.values()), arrows))
    if not page.rstrip().endswith("</html>") or page.count("<svg") != 1:
        fail("expected one <svg> in a complete page")


def check(a, doc, said, lost_said):
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        fail("expected an object with a traceEvents list")
        return
    if doc.get("displayTimeUnit") != "ns":
        fail("expected displayTimeUnit 'ns', found %r" % doc.get("displayTimeUnit"))
    events = doc["traceEvents"]

    # Tracks: a process_name per rank, "rank R (pid P)", pids 1..N.
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e["args"]["name"]
    track = {}
    for pid, name in names.items():
        m = re.fullmatch(r"rank (\d+) \(pid (\d+)\)", name)
        if not m:
            fail("process name %r is not 'rank R (pid P)'" % name)
            continue
        track[pid] = int(m.group(1))
    if sorted(track.values()) != list(range(a.ranks)):
        fail("expected one track per rank 0..%d, found %s" % (a.ranks - 1, sorted(track.values())))
    for e in events:
        if e.get("ph") != "M" and e.get("pid") not in track:
            fail("event on pid %r, which no rank's track has: %s" % (e.get("pid"), e))
            return

    calls = collections.defaultdict(list)  # rank -> call slices
    waits = collections.defaultdict(list)
    for e in events:
        if e.get("ph") != "X":
            continue
        r = track[e["pid"]]
        s, d = ns(e["ts"]), ns(e["dur"])
        if d < 0:
            fail("rank %d: slice %s has a negative duration" % (r, e["name"]))
        item = (s, s + d, e)
        (calls if e.get("cat") == "call" else waits)[r].append(item)

    # Every call once per rank; the counts the program gave (of its ops).
    ops = set(a.ops.split(",")) if a.ops else None
    for r in range(a.ranks):
        finished = [c for c in calls[r] if not c[2]["args"].get("unfinished")
                    and (ops is None or c[2]["name"] in ops)]
        numbers = [c[2]["args"]["call"] for c in calls[r]]
        dup = [n for n, k in collections.Counter(numbers).items() if k > 1]
        if dup:
            fail("rank %d: calls %s appear more than once" % (r, dup[:5]))
        if a.calls_numbered and r in said:
            out = [n for n in numbers if not 0 <= n < said[r]]
            if out:
                fail("rank %d: calls numbered %s, outside 0..%d" % (r, out[:5], said[r] - 1))
            by_number = sorted((c[2]["args"]["call"], c[0]) for c in calls[r])
            for (n0, s0), (n1, s1) in zip(by_number, by_number[1:]):
                if abs((s1 - s0) - (n1 - n0) * 10000) >= 1000:  # ranks start 100 ns apart
                    fail("rank %d: calls %d and %d start %d ns apart, not %d"
                         % (r, n0, n1, s1 - s0, (n1 - n0) * 10000))
                    break
        # After a death, the survivors may have finished one more call (with
        # an error) after they spoke.
        exact = a.expect in ("ok", "hang") or r == a.dead_rank
        if r in said and a.expect != "flood" and (
                len(finished) != said[r] if exact else len(finished) < said[r]):
            fail("rank %d said it made %d calls%s; the trace has %d finished ones"
                 % (r, said[r], " of " + a.ops if a.ops else "", len(finished)))
        if a.expect not in ("die", "hang") and any(c[2]["args"].get("unfinished") for c in calls[r]):
            fail("rank %d: unfinished calls in a job that ended well" % r)
        for c in finished:
            args = c[2]["args"]
            for k in ("call", "bytes", "path", "leader", "members", "dtype", "axes", "result"):
                if k not in args:
                    fail("rank %d: call slice %s lacks the argument %r" % (r, c[2]["name"], k))
                    break
    if a.expect != "flood":
        for r in range(a.ranks):
            if r not in said and not (a.expect == "die" and r != a.dead_rank):
                fail("rank %d did not say how many calls it made" % r)
    if a.expect == "die":
        unf = [c for c in calls[a.dead_rank] if c[2]["args"].get("unfinished")]
        if len(unf) != 1:
            fail("expected one unfinished call on rank %d's track, found %d"
                 % (a.dead_rank, len(unf)))
    if a.expect == "hang":
        for r in range(a.ranks):
            unf = [c for c in calls[r] if c[2]["args"].get("unfinished")]
            if len(unf) != 1:
                fail("expected one unfinished call on rank %d's track, found %d" % (r, len(unf)))

    # Waits inside a call slice of their own track.
    for r in range(a.ranks):
        for s, e, w in waits[r]:
            if not re.fullmatch(r"wait rank \d+", w["name"]):
                fail("rank %d: wait slice named %r, not 'wait rank R'" % (r, w["name"]))
            if not any(cs <= s and e <= ce for cs, ce, _ in calls[r]):
                fail("rank %d: wait %s at [%d, %d] ns lies in no call slice of its track"
                     % (r, w["name"], s, e))

    # Flows: one s, one f, steps on different ranks, in time order, each in
    # a call slice of the flow's op, all with one call number.
    flows = collections.defaultdict(list)
    for e in events:
        if e.get("ph") in ("s", "t", "f"):
            flows[e["id"]].append(e)
    if not flows and a.ranks > 1 and a.expect == "ok":
        fail("no flows in a job of collectives")
    for fid, steps in flows.items():
        kinds = collections.Counter(e["ph"] for e in steps)
        if kinds["s"] != 1 or kinds["f"] != 1:
            fail("flow %s: expected one 's' and one 'f', found %s" % (fid, dict(kinds)))
            continue
        ranks = [track[e["pid"]] for e in steps]
        if len(set(ranks)) != len(ranks):
            fail("flow %s: two steps on one rank (%s)" % (fid, ranks))
        order = {"s": 0, "t": 1, "f": 2}
        by_time = sorted(steps, key=lambda e: (ns(e["ts"]), order[e["ph"]]))
        if by_time[0]["ph"] != "s" or by_time[-1]["ph"] != "f":
            fail("flow %s: its start and finish are not first and last in time" % fid)
        numbers = set()
        for e in steps:
            r, t = track[e["pid"]], ns(e["ts"])
            inside = [c for c in calls[r] if c[0] <= t <= c[1] and c[2]["name"] == e["name"]]
            if not inside:
                fail("flow %s: its '%s' on rank %d at %d ns is in no %s slice of that rank"
                     % (fid, e["ph"], r, t, e["name"]))
                continue
            numbers.add(inside[0][2]["args"]["call"])
            if e["ph"] == "f" and e.get("bp") != "e":
                fail("flow %s: its finish lacks \"bp\":\"e\"" % fid)
        if len(numbers) > 1:
            fail("flow %s joins calls of different numbers %s" % (fid, sorted(numbers)))

    # Counters: never decreasing, ending at the rank's bytes.
    counters = collections.defaultdict(list)
    traffic = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "C" and e.get("name") == "bytes moved":
            counters[track[e["pid"]]].append((ns(e["ts"]), e["args"]["bytes"]))
        elif e.get("ph") == "C" and e.get("name") == "traffic":
            traffic[track[e["pid"]]].append((ns(e["ts"]), e["args"]["sent"], e["args"]["received"]))
        elif e.get("ph") == "C":
            fail("a counter named %r" % e.get("name"))
    for r in range(a.ranks):
        vals = [v for _, v in sorted(counters[r], key=lambda x: x[0])]
        if any(b < a_ for a_, b in zip(vals, vals[1:])):
            fail("rank %d: its bytes counter decreases" % r)
        total = sum(c[2]["args"]["bytes"] for c in calls[r] if not c[2]["args"].get("unfinished"))
        if vals and vals[-1] != total:
            fail("rank %d: its bytes counter ends at %d, its calls moved %d" % (r, vals[-1], total))
        # The traffic counter likewise, each way, ending at its calls' sent and received.
        for i, way in ((1, "sent"), (2, "received")):
            vals = [v[i] for v in sorted(traffic[r], key=lambda x: x[0])]
            if any(b < a_ for a_, b in zip(vals, vals[1:])):
                fail("rank %d: its traffic counter's %s decreases" % (r, way))
            total = sum(c[2]["args"].get(way, 0) for c in calls[r])
            if (vals[-1] if vals else 0) != total:
                fail("rank %d: its traffic counter's %s ends at %d, its calls say %d"
                     % (r, way, vals[-1] if vals else 0, total))

    lost = doc.get("otherData", {}).get("lost_events")
    if not isinstance(lost, list) or len(lost) != a.ranks:
        fail("expected otherData.lost_events, a count per rank, found %r" % lost)
        return
    if a.expect == "flood":
        if not sum(lost) or not lost_said:
            fail("expected lost events, counted in otherData and said on stderr; found %s, %s"
                 % (lost, "said" if lost_said else "not said"))
        for r in range(a.ranks):
            if r in said and len(calls[r]) + lost[r] != said[r]:
                fail("rank %d made %d calls: %d in the trace and %d lost do not add up"
                     % (r, said[r], len(calls[r]), lost[r]))
    elif sum(lost) or lost_said:
        fail("expected no lost events, found %s" % lost)
    if a.expect == "ok" and not sum(lost):
        # Every call of the job in the trace: what was sent was received.
        sent = sum(c[2]["args"].get("sent", 0) for r in range(a.ranks) for c in calls[r])
        received = sum(c[2]["args"].get("received", 0) for r in range(a.ranks) for c in calls[r])
        if sent != received:
            fail("the job's calls sent %d bytes between processes but received %d"
                 % (sent, received))


if __name__ == "__main__":
    sys.exit(main())
