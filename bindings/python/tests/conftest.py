"""Fixtures: one incmoe-switchd for the session, and N forked rank processes.

A correct run is a quiet run: every test fails if it, or a rank it forked,
printed an incmoe `error` log line, unless it is marked
@pytest.mark.expect_errors("why") (a test of failures, whose errors are the
point).  The check reads the test's captured file descriptors (capfd), which
the forked ranks share; tests that run a program check its output with
error_lines().

The tests import the package from this source tree (the libraries then come
from the build tree unless INCMOE_LIBDIR says otherwise).  Ranks are forked
from the pytest process, which has imported torch but runs no collective and
starts no communicator itself, so a child inherits no thread or connection;
forking spares each rank torch's import time.
"""

import datetime
import multiprocessing
import os
import queue
import random
import re
import sys
import tempfile
import time
import traceback

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

import incmoe  # noqa: E402

torch.set_num_threads(1)

# A test that goes wrong must end in an error, not wait for the switch's default
# ten-minute progress timeout; torch.distributed groups ask the same bound
# (init_process_group's timeout, which the incmoe backend asks of the switch).
SWITCH_ARGS = ["--progress-timeout-ms", "20000"]
PG_TIMEOUT = datetime.timedelta(seconds=20)
RANK_TIMEOUT_S = 150

# Every element type the library carries (incmoe_dtype_t), for the suites that try each.
DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int32,
    torch.int64,
    torch.int8,
    torch.uint8,
]


# What libincmoe's log (base/log.c) writes at level error: "[SEC.USEC] IDENT error SUBSYS ...".
_ERROR_LINE = re.compile(r"^\[\d+\.\d+\] \S+ error ", re.M)


def error_lines(text):
    """The incmoe error log lines in text."""
    return [line for line in text.splitlines() if _ERROR_LINE.match(line)]


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "expect_errors(why): the test provokes failures, so incmoe error lines are expected",
    )


@pytest.fixture(autouse=True)
def quiet_run(request, capfd):
    """Fails a passing test whose run printed an incmoe error line (see the top)."""
    yield
    out, err = capfd.readouterr()  # pytest has shown them with the call's report already
    if request.node.get_closest_marker("expect_errors") is not None:
        return
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.passed:
        lines = error_lines(out + err)
        if lines:
            pytest.fail("a run that succeeded printed %d incmoe error line(s):\n%s"
                        % (len(lines), "\n".join(lines)), pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keeps the call phase's report on the item for quiet_run."""
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.rep_call = rep


@pytest.fixture(scope="session")
def switch():
    with incmoe.Switch(SWITCH_ARGS) as sw:
        yield sw


def new_job():
    return random.getrandbits(63)


def _child(fn, rank, nranks, args, q):
    torch.set_num_threads(1)
    try:
        fn(rank, nranks, *args)
        report, code = None, 0
    except BaseException:
        report, code = traceback.format_exc(), 1
    q.put((rank, report))
    q.close()
    q.join_thread()  # the report is in the pipe before the process ends
    os._exit(code)


def run_ranks(fn, nranks, *args, timeout=RANK_TIMEOUT_S, lost=()):
    """fn(rank, nranks, *args) in nranks forked processes; fails the test with
    every failing rank's traceback, or when ranks outlive the timeout.  The
    ranks in lost are killed by the test: they end without a report."""
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(fn, r, nranks, args, q)) for r in range(nranks)]
    for p in procs:
        p.start()
    reports = {}
    t0 = time.monotonic()
    while len(reports) < nranks - len(lost):
        left = timeout - (time.monotonic() - t0)
        if left <= 0:
            break
        try:
            r, tb = q.get(timeout=min(left, 1.0))
            reports[r] = tb
        except queue.Empty:
            if all(not p.is_alive() for p in procs) and q.empty():
                break
    for p in procs:
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join()
    problems = []
    for r, p in enumerate(procs):
        if r in lost:
            continue
        if r not in reports:
            problems.append("rank %d: no report (exit code %s; timed out or crashed)" % (r, p.exitcode))
        elif reports[r] is not None:
            problems.append("rank %d:\n%s" % (r, reports[r]))
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture
def store_path():
    """A file for torch's FileStore (init_method=file://...), removed afterwards."""
    d = tempfile.mkdtemp(prefix="incmoe-pytest-")
    yield os.path.join(d, "store")
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    os.rmdir(d)
