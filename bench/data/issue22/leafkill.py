#!/usr/bin/env python3
"""Kill (or stop) a leaf, the root or a rank of a 2-leaf tree (2 ranks per leaf) mid-collective,
many times; time every other rank's error from the fault.
usage: leafkill.py BUILD ROUNDS FAULT(kill|stop) VICTIM(leaf|root|rank)"""
import os, random, signal, subprocess, sys, time
B, rounds, fault, victim = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
SWD = f"{B}/switch/incmoe-switchd"
PERF = f"{B}/tools/incmoe-perf"
TIMEOUT_MS = 2000
env = dict(os.environ, INCMOE_TIMEOUT_MS=str(TIMEOUT_MS))

def start_switch(extra):
    p = subprocess.Popen([SWD, "--listen", "127.0.0.1:0", "--timeout-ms", str(TIMEOUT_MS)] + extra,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    line = p.stdout.readline()
    return p, line.split()[-1]

lat, late, crashes, hangs = [], 0, 0, 0
random.seed(7)
for i in range(rounds):
    root, raddr = start_switch([])
    leaves = [start_switch(["--parent", raddr]) for _ in range(2)]
    ranks = []
    for r in range(4):
        addr = leaves[r // 2][1]
        ranks.append(subprocess.Popen([PERF, "-N", "4", "--rank", str(r), "--switch", addr, "--job", str(100 + i),
                                       "--op", "agrs", "-b", "4M", "-e", "4M", "-n", "100000", "-w", "0"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env))
    time.sleep(1.0 + random.random())  # the job runs collectives back to back by now
    vp = {"leaf": leaves[0][0], "root": root, "rank": ranks[0]}[victim]
    t0 = time.monotonic()
    vp.send_signal(signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
    for p in ranks:
        if p is vp:
            continue
        try:
            p.wait(timeout=TIMEOUT_MS / 1000 + 10)
            lat.append(time.monotonic() - t0)
            if p.returncode == 0:
                hangs += 1  # finished without an error: cannot be
        except subprocess.TimeoutExpired:
            hangs += 1
            p.kill()
    others = [root] + [l[0] for l in leaves]
    for p in others:
        if p is not vp and p.poll() is not None:
            crashes += 1
    if fault == "stop":
        vp.send_signal(signal.SIGCONT)
    if victim == "rank":
        vp.kill()
        vp.wait()
    for p in others:
        p.terminate()
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
lat.sort()
n = len(lat)
bound = TIMEOUT_MS / 1000 + 1
print(f"{fault} {victim}: {rounds} rounds, {n} rank errors timed, median {lat[n//2]*1000:.0f} ms, "
      f"p99 {lat[min(n-1, int(n*0.99))]*1000:.0f} ms, max {lat[-1]*1000:.0f} ms, "
      f"over timeout+1s ({bound:.0f} s): {sum(1 for x in lat if x > bound)}, no error/hang: {hangs}, "
      f"other switches died: {crashes}")
