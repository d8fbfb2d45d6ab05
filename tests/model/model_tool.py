"""What the suites of tests/model share: where the source tree and tools/incmoe-model are, and
the model's package, imported from the source tree beside that executable."""

import importlib
import os
import sys

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOOL = os.path.join(TOP, "tools", "incmoe-model")


def load_tool():
    """The model's package, from the source tree beside its executable (TOOL)."""
    tools = os.path.dirname(TOOL)
    if tools not in sys.path:
        sys.path.insert(0, tools)
    return importlib.import_module("incmoe_model")


def check_targets_file(name, points, capsys):
    """`incmoe-model check` of bench/data/model/NAME, the targets file BENCHMARKS.md quotes:
    every one of its POINTS testbed points carries its measurement, and check exits 1 exactly
    while a bandwidth-bound point is over tolerance."""
    rc = load_tool().main(["check", os.path.join(TOP, "bench", "data", "model", name)])
    out = capsys.readouterr().out
    assert "to be measured" not in out
    assert f"{points} of {points} points measured" in out
    assert rc == (1 if "over tolerance" in out else 0)
