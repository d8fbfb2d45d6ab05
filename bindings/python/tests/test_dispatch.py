"""Communicator.dispatch and Communicator.combine on N = 2, 3, 4 ranks and every
algorithm, checked against a torch reference each rank computes alone: every
rank draws any rank's rows and mask from the same seeds, so the rows it must
receive, their sources and what each of its rows must combine to are known
without an exchange.  Values are small integers in every type, so every
reduction is exact; float32 rows of random values check the order too (the
others' partials in ascending rank order, the owner's own last), bit for bit.
"""

import zlib

import pytest
import torch

import incmoe
from conftest import DTYPES, new_job, run_ranks

ALGOS = ["inc", "ring", "a2a"]
NRANKS = [2, 3, 4]
ROW = (3, 2)  # the shape of a row past dim 0


def every_algo_and_size(test):
    """test(switch, algo, n) on each algorithm and each number of ranks."""
    return pytest.mark.parametrize("n", NRANKS)(pytest.mark.parametrize("algo", ALGOS)(test))


def run_comms(body, switch, algo, n):
    """body(c, rank, n) on n ranks, each with its communicator c of a new job on switch by
    algo; c is closed after a body that returns."""

    def rank_body(rank, n, addr, job):
        c = incmoe.Communicator(addr, job, rank, n, algo=algo)
        body(c, rank, n)
        c.close()

    run_ranks(rank_body, n, switch.address, new_job())


def _gen(*key):
    """A generator every rank seeds alike from key (str hashes differ between processes)."""
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


def _ints(g, shape, dtype, lo=-8, hi=9):
    lo = 0 if dtype == torch.uint8 else lo
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def _rows_of(s, step):
    """Rank s's rows at a step: some ranks none, others a few dozen."""
    return 0 if (s + step) % 5 == 4 else 7 + 11 * ((s * 3 + step) % 4)


def _mask(s, n, step, density=0.5):
    """Rank s's mask at a step: random, with a row that goes nowhere, one to every rank and one
    to its owner alone."""
    T = _rows_of(s, step)
    m = torch.rand(T, n, generator=_gen("mask", s, step)) < density
    if T >= 3:
        m[0] = False
        m[1] = True
        m[2] = False
        m[2, s] = True
    return m


def _x(s, step, dtype):
    return _ints(_gen("x", s, step, str(dtype)), (_rows_of(s, step),) + ROW, dtype)


def _received(me, n, step, dtype):
    """The rows rank me must receive, and their (source rank, source row)."""
    rows, src = [], []
    for s in range(n):
        m = _mask(s, n, step)[:, me]
        rows.append(_x(s, step, dtype)[m])
        src += [(s, int(i)) for i in torch.nonzero(m).flatten()]
    return torch.cat(rows), torch.tensor(src, dtype=torch.int64).view(-1, 2)


def _partial(d, s, i, step, dtype, op):
    """Rank d's partial of rank s's row i: small integers (+-1 for products)."""
    g = _gen("partial", d, s, i, step, str(dtype))
    if op == "prod":
        return (
            _ints(g, ROW, dtype, 0, 2) * 2 - 1
            if dtype != torch.uint8
            else torch.ones(ROW, dtype=dtype)
        )
    return _ints(g, ROW, dtype, -4, 5)


def _partials(me, source, step, dtype, op):
    return (
        torch.stack([_partial(me, int(s), int(i), step, dtype, op) for s, i in source.tolist()])
        if len(source)
        else torch.empty((0,) + ROW, dtype=dtype)
    )


def _combined(me, n, step, dtype, op):
    """What rank me gets back: per row, op over the partials of exactly its mask's ranks."""
    m = _mask(me, n, step)
    out = torch.zeros((m.shape[0],) + ROW, dtype=dtype)
    fold = {"sum": torch.add, "prod": torch.mul, "max": torch.maximum, "min": torch.minimum}[op]
    for i in range(m.shape[0]):
        ranks = [d for d in range(n) if m[i, d]]
        if ranks:
            acc = _partial(ranks[0], me, i, step, dtype, op)
            for d in ranks[1:]:
                acc = fold(acc, _partial(d, me, i, step, dtype, op))
            out[i] = acc
    return out


def _eq(what, got, want):
    assert got.dtype == want.dtype and tuple(got.shape) == tuple(
        want.shape
    ), "%s: %s %s, want %s %s" % (what, got.dtype, tuple(got.shape), want.dtype, tuple(want.shape))
    assert torch.equal(got, want), "%s: got\n%s\nwant\n%s" % (what, got, want)


def _ops(dtype):
    return ["sum", "max", "min"] + (["prod"] if dtype.is_floating_point else [])


# --- exact results ---------------------------------------------------------------------------


def exact_body(c, rank, n):
    step = 0
    for dtype in DTYPES:
        for op in _ops(dtype):
            step += 1
            h = c.dispatch(_x(rank, step, dtype), _mask(rank, n, step))
            rows, src = _received(rank, n, step, dtype)
            _eq("rows %s step %d" % (dtype, step), h.rows, rows)
            _eq("source %s step %d" % (dtype, step), h.source, src)
            assert len(h) == rows.shape[0] and h.attempts in (1, 2)
            y = c.combine(h, _partials(rank, src, step, dtype, op), op=op)
            _eq("combine %s %s step %d" % (dtype, op, step), y, _combined(rank, n, step, dtype, op))
            with pytest.raises(ValueError, match="combined already"):
                c.combine(h, _partials(rank, src, step, dtype, op), op=op)


@every_algo_and_size
def test_dispatch_and_combine_match_the_reference_in_every_type(switch, algo, n):
    run_comms(exact_body, switch, algo, n)


def order_body(c, rank, n):
    """float32 rows of random values: the others' partials summed in ascending rank order,
    the owner's own last, bit for bit."""
    for step in range(3):
        x = torch.randn((_rows_of(rank, step), 5), generator=_gen("fx", rank, step))
        h = c.dispatch(x, _mask(rank, n, step, 0.7))
        parts = (
            torch.stack(
                [
                    torch.randn(5, generator=_gen("fp", rank, s, i, step))
                    for s, i in h.source.tolist()
                ]
            )
            if len(h)
            else torch.empty(0, 5)
        )
        y = c.combine(h, parts)
        m = _mask(rank, n, step, 0.7)
        want = torch.zeros(m.shape[0], 5)
        for i in range(m.shape[0]):
            others = [
                torch.randn(5, generator=_gen("fp", d, rank, i, step))
                for d in range(n)
                if d != rank and m[i, d]
            ]
            acc = others[0] if others else None
            for p in others[1:]:
                acc = acc + p
            own = torch.randn(5, generator=_gen("fp", rank, rank, i, step)) if m[i, rank] else None
            want[i] = (
                own + acc
                if own is not None and acc is not None
                else (own if own is not None else (acc if acc is not None else torch.zeros(5)))
            )
        assert torch.equal(y, want), "step %d: %s against %s" % (step, y, want)


@every_algo_and_size
def test_float_sums_are_the_reduce_scatter_order_bit_for_bit(switch, algo, n):
    run_comms(order_body, switch, algo, n)


def nowhere_body(c, rank, n):
    """Every mask empty (rows on every rank, none received anywhere), then no rows at all."""
    x = _ints(_gen("nowhere", rank), (5 + rank,) + ROW, torch.int64)
    h = c.dispatch(x, torch.zeros(5 + rank, n, dtype=torch.bool))
    _eq("rows of empty masks", h.rows, torch.empty((0,) + ROW, dtype=torch.int64))
    _eq("sources of empty masks", h.source, torch.empty((0, 2), dtype=torch.int64))
    y = c.combine(h, torch.empty((0, 4), dtype=torch.float64))
    _eq("combine of empty masks", y, torch.zeros((5 + rank, 4), dtype=torch.float64))
    h = c.dispatch(torch.empty((0,) + ROW), torch.zeros(0, n, dtype=torch.bool))
    assert len(h) == 0
    _eq("combine of no rows", c.combine(h, torch.empty(0, 3)), torch.empty(0, 3))


@every_algo_and_size
def test_masks_that_name_no_rank_deliver_nothing_and_combine_to_zeros(switch, algo, n):
    run_comms(nowhere_body, switch, algo, n)


# --- async, out=, the capacity retry ------------------------------------------------------------


def async_body(c, rank, n):
    """The MoE case: the dispatch of step i in flight with the combine of step i - 1."""
    dt = torch.float32
    prev, prev_step = None, None
    for step in range(1, 7):
        dw = c.dispatch(_x(rank, step, dt), _mask(rank, n, step), async_op=True)
        assert isinstance(dw, incmoe.Work) and isinstance(dw.handle, incmoe.Dispatch)
        cw = None
        if prev is not None:
            parts = _partials(rank, prev.source, prev_step, dt, "sum")
            cw = c.combine(prev, parts, async_op=True)
        assert dw.wait() is True and dw.is_completed()
        h = dw.handle
        rows, src = _received(rank, n, step, dt)
        _eq("async rows step %d" % step, h.rows, rows)
        _eq("async source step %d" % step, h.source, src)
        if cw is not None:
            if step % 2:
                while not cw.is_completed():
                    pass
            assert cw.wait(timeout=30)
            _eq(
                "async combine step %d" % prev_step,
                cw.result,
                _combined(rank, n, prev_step, dt, "sum"),
            )
        prev, prev_step = h, step
    prev.release()
    with pytest.raises(ValueError, match="released"):
        c.combine(prev, _partials(rank, prev.source, prev_step, dt, "sum"))


@every_algo_and_size
def test_async_dispatch_in_flight_with_the_previous_combine(switch, algo, n):
    run_comms(async_body, switch, algo, n)


def capacity_body(c, rank, n):
    dt = torch.int32
    T = 6
    x = _ints(_gen("cap", rank), (T,) + ROW, dt)
    everyone = torch.ones(T, n, dtype=torch.bool)
    # The first guess (T rows) is short when every row goes everywhere: every rank retries
    # once, together, with exactly its R = N T.
    h = c.dispatch(x, everyone)
    assert h.attempts == 2 and len(h) == n * T
    ref = torch.cat([_ints(_gen("cap", s), (T,) + ROW, dt) for s in range(n)])
    _eq("retried rows", h.rows, ref)
    h.release()
    # Now the guess is the last R: no retry.
    h = c.dispatch(x, everyone)
    assert h.attempts == 1
    _eq("guessed rows", h.rows, ref)
    # out= with room to spare: rows is a view of its first R rows, the rest untouched.
    out = torch.full((n * T + 3,) + ROW, -77, dtype=dt)
    h2 = c.dispatch(x, everyone, out=out)
    assert h2.attempts == 1 and h2.rows.data_ptr() == out.data_ptr()
    _eq("out= rows", out[: n * T], ref)
    assert (out[n * T :] == -77).all()
    # combine's out=: the result lands there and is returned.
    y = torch.full((T,) + ROW, 5, dtype=dt)
    parts = torch.ones((n * T,) + ROW, dtype=dt)
    assert c.combine(h2, parts, out=y) is y
    _eq("combine out=", y, torch.full((T,) + ROW, n, dtype=dt))
    y = c.combine(h, parts, op="max")
    _eq("combine max", y, torch.ones((T,) + ROW, dtype=dt))
    # Rank 0's out= is short: every rank's capacity verdict fails alike, the others retry
    # with room, rank 0 refuses its retry: a ValueError there, IncmoeError elsewhere naming it.
    if rank == 0:
        with pytest.raises(ValueError, match="out has 2 rows, rank 0 receives %d" % (n * T)):
            c.dispatch(x, everyone, out=torch.empty((2,) + ROW, dtype=dt))
    else:
        with pytest.raises(
            incmoe.IncmoeError, match="rank 0 refused its dispatch arguments: " "out has 2 rows"
        ) as e:
            c.dispatch(x, everyone)
        assert e.value.status == incmoe.Status.ERR_INVALID_ARG
    # And the communicator carries on: rows that go nowhere but home.
    own = torch.zeros(T, n, dtype=torch.bool)
    own[:, rank] = True
    h = c.dispatch(x, own)
    _eq("own rows", h.rows, x)
    _eq("own sources", h.source, torch.tensor([[rank, i] for i in range(T)]))
    _eq("own combine", c.combine(h, h.rows), x)


@every_algo_and_size
def test_out_and_the_capacity_retry(switch, algo, n):
    run_comms(capacity_body, switch, algo, n)


def async_retry_body(c, rank, n):
    """An async dispatch whose guess is short retries inside is_completed() or wait(), and a
    dispatch posted meanwhile waits for it, so every rank posts the retry in the same place
    whoever polled first: rank 0 polls the first to the end before posting the second, the
    others post the second at once."""
    dt = torch.float32
    a = _x(rank, 60, dt)
    b = _ints(_gen("b", rank), (4,) + ROW, dt)
    wa = c.dispatch(a, torch.ones(a.shape[0], n, dtype=torch.bool), async_op=True)
    if rank == 0:
        while not wa.is_completed():
            pass
    wb = c.dispatch(b, torch.ones(4, n, dtype=torch.bool), async_op=True)
    assert wa.is_completed()  # the second post waited for it
    wb.wait()
    want_a = torch.cat([_x(s, 60, dt) for s in range(n)])
    want_b = torch.cat([_ints(_gen("b", s), (4,) + ROW, dt) for s in range(n)])
    _eq("first rows", wa.handle.rows, want_a)
    _eq("second rows", wb.handle.rows, want_b)
    # The first guessed T rows (and no rank has them all when some have rows); the second
    # guessed the first's R, short when it received fewer than N x 4.
    assert wa.handle.attempts == (2 if want_a.shape[0] > a.shape[0] else 1)
    assert wb.handle.attempts == (2 if want_b.shape[0] > want_a.shape[0] else 1)
    y = c.combine(wb.handle, torch.ones_like(wb.handle.rows))
    _eq("second combine", y, torch.full_like(b, n))
    wa.handle.release()


@every_algo_and_size
def test_an_async_capacity_retry_keeps_every_ranks_order(switch, algo, n):
    run_comms(async_retry_body, switch, algo, n)


def dropped_body(c, rank, n):
    """Dispatches never combined are freed when their handle is dropped: more than the
    library's window of them (1024 kept per communicator) and the next still posts."""
    x = torch.full((2, 3), float(rank))
    m = torch.ones(2, n, dtype=torch.bool)
    for _ in range(1100):
        h = c.dispatch(x, m)
    del h
    h = c.dispatch(x, m)
    _eq(
        "rows after 1100 dropped",
        h.rows,
        torch.arange(n).float().repeat_interleave(2).unsqueeze(1).expand(2 * n, 3).contiguous(),
    )


@pytest.mark.parametrize("algo", ALGOS)
def test_dropped_dispatches_are_released(switch, algo):
    run_comms(dropped_body, switch, algo, 2)


# --- refusals ---------------------------------------------------------------------------------


def refusal_body(c, rank, n):
    dt = torch.float32
    bad = n - 1  # the rank whose arguments are wrong
    step = 40
    x, m = _x(rank, step, dt), _mask(rank, n, step)
    T = _rows_of(bad, step)  # the messages name the bad rank's rows
    cases = [
        (m[:, :1], "mask has shape \\(%d, 1\\), expected \\(%d, %d\\)" % (T, T, n)),
        (m.to(torch.int32), "mask is a torch.int32 tensor"),
        ([[True] * n] * T, "mask is a list"),
    ]
    for bad_mask, says in cases:
        if rank == bad:
            with pytest.raises(ValueError, match=says):
                c.dispatch(x, bad_mask)
        else:
            with pytest.raises(
                incmoe.IncmoeError, match="rank %d refused its dispatch arguments: %s" % (bad, says)
            ) as e:
                c.dispatch(x, m)
            assert e.value.status == incmoe.Status.ERR_INVALID_ARG
    h = c.dispatch(x, m)
    rows, src = _received(rank, n, step, dt)
    _eq("rows after the refusals", h.rows, rows)
    parts = _partials(rank, src, step, dt, "sum")
    wrong = [
        (parts[:-1] if len(parts) else torch.zeros((1,) + ROW), "partials has shape"),
        (
            (
                parts.to(torch.complex64)
                if len(parts)
                else torch.zeros((0,) + ROW, dtype=torch.complex64)
            ),
            "dtype torch.complex64",
        ),
    ]
    for bad_parts, says in wrong:
        if rank == bad:
            with pytest.raises(ValueError, match=says):
                c.combine(h, bad_parts)
        else:
            with pytest.raises(
                incmoe.IncmoeError,
                match="rank %d refused its combine arguments: .*%s" % (bad, says),
            ):
                c.combine(h, parts)
    if rank == bad:
        with pytest.raises(ValueError, match="op 'avg'"):
            c.combine(h, parts, op="avg")
    else:
        with pytest.raises(incmoe.IncmoeError, match="refused its combine arguments"):
            c.combine(h, parts)
    # The failed combines kept the dispatch: it combines now, exactly.
    _eq("combine after the refusals", c.combine(h, parts), _combined(rank, n, step, dt, "sum"))
    c.barrier()


@every_algo_and_size
def test_a_refusal_on_one_rank_fails_the_others_with_its_reason(switch, algo, n):
    run_comms(refusal_body, switch, algo, n)


def mismatch_body(c, rank, n):
    """Ranks that disagree on a row's size fail the dispatch, or the combine, on every rank
    alike with the library's reason; the failed combine keeps its dispatch."""
    T = 3
    m = torch.ones(T, n, dtype=torch.bool)
    odd = n - 1
    w = c.dispatch(torch.zeros(T, 4 if rank == odd else 3), m, async_op=True)
    says = "rank %d has rows of 16 bytes, rank 0 of 12" % odd
    for _ in range(2):  # the failure is kept and raised again
        with pytest.raises(incmoe.IncmoeError, match=says) as e:
            w.wait()
        assert e.value.status == incmoe.Status.ERR_MISMATCH
    with pytest.raises(RuntimeError, match="failed"):
        w.handle.rows
    with pytest.raises(ValueError, match="one that failed"):
        c.combine(w.handle, torch.zeros(0, 3))
    x = torch.full((T, 3), float(rank + 1))
    h = c.dispatch(x, m)
    for shape, dtype, why in [
        (
            (n * T, 5 if rank == odd else 4),
            torch.float32,
            "rank %d has rows of 5 float \\(sum\\), rank 0 of 4 float" % odd,
        ),
        (
            (n * T, 4),
            torch.float64 if rank == odd else torch.float32,
            "rank %d has rows of 4 double \\(sum\\), rank 0 of 4 float" % odd,
        ),
    ]:
        with pytest.raises(incmoe.IncmoeError, match=why) as e:
            c.combine(h, torch.ones(shape, dtype=dtype))
        assert e.value.status == incmoe.Status.ERR_MISMATCH
    y = c.combine(h, torch.ones(n * T, 4))
    _eq("combine after the mismatches", y, torch.full((T, 4), float(n)))


@every_algo_and_size
def test_ranks_that_disagree_fail_the_call_on_every_rank(switch, algo, n):
    run_comms(mismatch_body, switch, algo, n)


def two_refusals_body(c, rank, n):
    """Two ranks refuse: every other rank reads the lowest one's reason."""
    x = torch.zeros(2, 3)
    if rank in (0, n - 1):
        with pytest.raises(ValueError, match="mask has shape"):
            c.dispatch(x, torch.ones(2, n + 1 + rank, dtype=torch.bool))
    else:
        with pytest.raises(
            incmoe.IncmoeError,
            match="rank 0 refused its dispatch arguments: mask has shape \\(2, %d\\)" % (n + 1),
        ):
            c.dispatch(x, torch.ones(2, n, dtype=torch.bool))
    h = c.dispatch(x, torch.ones(2, n, dtype=torch.bool))
    assert len(h) == 2 * n


@pytest.mark.parametrize("algo", ALGOS)
def test_the_lowest_refusing_rank_gives_the_reason(switch, algo):
    run_comms(two_refusals_body, switch, algo, 3)


def test_a_dispatch_in_flight_has_no_rows_yet(switch):
    def body(c, rank, n):
        w = c.dispatch(torch.ones(3, 2), torch.ones(3, n, dtype=torch.bool), async_op=True)
        if rank == 0 and not w.is_completed():
            with pytest.raises(RuntimeError, match="not completed"):
                w.handle.rows
        w.wait()
        assert len(w.handle) == 3 * n

    run_comms(body, switch, "inc", 2)
