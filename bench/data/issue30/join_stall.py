#!/usr/bin/env python3
"""How long a child switch's event loop stops serving a job while another job
joins through a slow parent (issue 30, item 3).

A root and a child switch (--parent), both --timeout-ms 60000 (so a blocking
handshake to the parent would wait min(timeout/4, 5 s) = 5 s).  Job A: two
ranks on the child, a job wholly beneath it, running small AllReduces back to
back and timing each.  Once A runs, the root is stopped (SIGSTOP: the kernel
still accepts its TCP connections, nothing answers the handshake) and job B's
rank joins the child, which must open a link to the root for B.  Printed: the
longest of A's AllReduces while B's link waits, against the median before, and
(once the root goes on and B's link is up) the child's own figure from its log:
the longest the loop spent on B's link in one go.

usage: join_stall.py SWITCHD [SECONDS [control]]   (INCMOE_BUILD_DIR: the libraries)
control: the same run with nobody joining (the loop's own noise).
"""
import json, os, re, signal, subprocess, sys, tempfile, time

SWITCHD = sys.argv[1]
WINDOW = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
JOIN_B = not (len(sys.argv) > 3 and sys.argv[3] == "control")  # control: nobody joins
HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.join(HERE, "..", "..", "..", "bindings", "python")

RANK = r"""
import sys, time, json, numpy
sys.path.insert(0, %r)
import incmoe
addr, job, rank, nranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
c = incmoe.Communicator(addr, job, rank, nranks, timeout_ms=60000)
x = numpy.ones(16, dtype=numpy.float32)
print("formed", flush=True)
until = float(sys.stdin.readline())
lat = []
while True:  # both ranks stop after the same AllReduce: the one where either is past until
    x[:] = 1
    x[0] = 0 if time.time() >= until else 1
    t0 = time.time()
    c.all_reduce(x)
    lat.append((t0, time.time() - t0))
    if x[0] < 2:
        break
c.barrier()
print(json.dumps(lat), flush=True)
c.close()
""" % PY

JOINER = r"""
import sys
sys.path.insert(0, %r)
import incmoe
print("ready", flush=True)
sys.stdin.readline()
try:
    incmoe.Communicator(sys.argv[1], 2, 0, 2, timeout_ms=60000)
except Exception as e:
    print("B:", e, flush=True)
""" % PY


def switchd(*args, log=None):
    p = subprocess.Popen([SWITCHD, "--listen", "127.0.0.1:0", "--timeout-ms", "60000",
                          "--log-level", "info" if log else "warn"] + list(args),
                         stdout=subprocess.PIPE, stderr=log or subprocess.DEVNULL, text=True)
    line = p.stdout.readline().split()
    return p, line[-1]


def main():
    root, raddr = switchd()
    child_log = tempfile.TemporaryFile(mode="w+")
    child, caddr = switchd("--parent", raddr, log=child_log)
    procs = [root, child]
    try:
        ranks = [subprocess.Popen([sys.executable, "-c", RANK, caddr, "1", str(r), "2"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for r in range(2)]
        procs += ranks
        for p in ranks:
            assert p.stdout.readline().strip() == "formed"
        b = subprocess.Popen([sys.executable, "-c", JOINER, caddr], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(b)
        assert b.stdout.readline().strip() == "ready"
        t_join = time.time() + 2.0
        until = t_join + WINDOW
        for p in ranks:
            p.stdin.write("%r\n" % until)
            p.stdin.flush()
        while time.time() < t_join - 1.0:
            time.sleep(0.05)
        os.kill(root.pid, signal.SIGSTOP)
        while time.time() < t_join:
            time.sleep(0.01)
        if JOIN_B:
            b.stdin.write("go\n")
            b.stdin.flush()
        out = [json.loads(p.stdout.readlines()[-1]) for p in ranks]
        for p in ranks:
            p.wait(30)
        # The root goes on, so B's link comes up and the child says how long the loop spent on
        # the link in one go: the join's own share of any stall, apart from CPU waits.
        os.kill(root.pid, signal.SIGCONT)
        longest = None
        for _ in range(100):
            child_log.seek(0)
            m = re.search(r"the longest the loop spent on it in one go: ([0-9.]+) ms",
                          child_log.read())
            if m or not JOIN_B:
                longest = float(m.group(1)) if m else None
                break
            time.sleep(0.1)
        lat = sorted(out[0] + out[1])
        before = sorted(l for t, l in lat if t < t_join)
        during = [l for t, l in lat if t >= t_join]
        print(json.dumps({"switchd": SWITCHD, "b_joins": JOIN_B, "ops_before": len(before),
                          "median_before_ms": 1000 * before[len(before) // 2],
                          "ops_during": len(during),
                          "max_during_ms": 1000 * max(during) if during else None,
                          "child_longest_link_step_ms": longest}))
    finally:
        try:
            os.kill(root.pid, signal.SIGCONT)
        except OSError:
            pass
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


main()
