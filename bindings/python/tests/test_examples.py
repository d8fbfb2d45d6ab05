"""The examples run as a user runs them (their own switch, their own ranks),
report success and print no incmoe error line: a correct run is a quiet run."""

import importlib.util
import os
import subprocess
import sys

import pytest
from conftest import error_lines

HF = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                        reason="needs transformers (the [hf] extra)")

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")


@pytest.mark.parametrize(
    "script,args,want",
    [
        ("collectives.py", [], "collectives example: ok"),
        ("moe_layer.py", ["--mode", "pipelined"], "moe example (pipelined, inc): ok"),
    ]
    + [
        pytest.param("hf_model.py", ["--model", m], "hf example (%s, pipelined): ok" % m, marks=HF)
        for m in ("olmoe", "mixtral", "qwen2_moe", "qwen3_moe")
    ],
)
def test_example(script, args, want):
    env = dict(os.environ)
    env.pop("INCMOE_SWITCH", None)  # each example starts its own switch
    r = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, script)] + args,
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert r.returncode == 0 and want in r.stdout, r.stdout + r.stderr
    assert error_lines(r.stdout + r.stderr) == [], r.stdout + r.stderr
