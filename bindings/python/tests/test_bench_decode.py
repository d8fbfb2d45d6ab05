"""python -m incmoe.bench.prefill --generate K --decode-batches ...: the ms per output token
at several decode batches per rank in one invocation, per variant, with each batch's ratio
to agrs's as the printed times give it, and the path each incmoe layer's last decode step
ran: a forced variant its forced path, a variant that leaves the mode to the layer (a2a-auto,
inc-auto) its own algorithm with the layer's choice.  Bad --decode-batches are refused with
a reason before anything starts."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BATCHES = [1, 16]


def bench(*args, timeout=300):
    env = dict(os.environ)
    env.pop("INCMOE_SWITCH", None)  # embedded: it starts its own switch
    env.setdefault("HF_HUB_OFFLINE", "1")
    cmd = [sys.executable, "-m", "incmoe.bench.prefill", "--size", "tiny", "-N", "2", "-B", "2",
           "-L", "8", "-n", "1"] + list(args)
    return subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_decode_batches_in_one_invocation():
    variants = ["agrs", "a2a", "a2a-auto", "inc-auto"]
    r = bench("-w", "1", "--generate", "2", "--decode-batches", ",".join(map(str, BATCHES)),
              "--variants", ",".join(variants))
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("| decode variant"))
    head = [c.strip() for c in lines[at].strip("|").split("|")]
    assert head == (["decode variant"] + ["B=%d ms/token" % b for b in BATCHES] +
                    ["B=%d / agrs" % b for b in BATCHES]), lines[at]
    rows = {}
    for x in lines[at + 2:at + 2 + len(variants)]:
        cells = [c.strip() for c in x.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    assert list(rows) == variants, r.stdout
    n = len(BATCHES)
    for name, cells in rows.items():
        ms = [float(c) for c in cells[:n]]
        assert all(t > 0 for t in ms), (name, r.stdout)
        for b, t, ratio in zip(BATCHES, ms, cells[n:]):
            ref = float(rows["agrs"][BATCHES.index(b)])
            # The printed times are rounded to 10 us: the ratio within that.
            assert abs(float(ratio) - t / ref) <= 0.006 * (t / ref) + 0.011 / ref, (name, b)
    paths = {}
    for x in lines:
        if x.startswith("# decode paths "):
            f = x.split()
            paths[(f[3], f[4])] = f[5:]
    assert sorted(paths) == sorted((v, "B=%d" % b) for v in variants[1:] for b in BATCHES)
    for b in BATCHES:
        assert paths[("a2a", "B=%d" % b)] == ["a2a/baseline/masked"] * 2  # tiny: 2 blocks
        assert all(p.startswith("a2a/") for p in paths[("a2a-auto", "B=%d" % b)])
        assert all(p.startswith("inc/") for p in paths[("inc-auto", "B=%d" % b)])
    assert "after an untimed 1-step generate" in r.stdout


@pytest.mark.parametrize("args,says", [
    (["--decode-batches", "1,4"], "--decode-batches needs --generate K"),
    (["--generate", "2", "--decode-batches", "1,x"], "expected batches per rank such as 1,4,16"),
    (["--generate", "2", "--decode-batches", "0,4"], "each batch at least 1, each once"),
    (["--generate", "2", "--decode-batches", "4,4"], "each batch at least 1, each once"),
])
def test_bad_decode_batches_are_refused(args, says):
    r = bench(*args, timeout=60)
    assert r.returncode == 2 and says in r.stderr, r.stdout + r.stderr
    assert "| variant" not in r.stdout
