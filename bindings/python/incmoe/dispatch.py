"""Routing-aware dispatch and combine (incmoe.h, "Dispatch and combine"), for
Communicator.dispatch and Communicator.combine.

dispatch(x, mask) sends row i of x ([T, ...]) to every rank r with mask[i, r]
(a bool [T, N] tensor) and returns a Dispatch: the rows this rank received,
[R, ...] in the order of their source rank, then source row, this rank's own
included, and their sources, an int64 [R, 2] tensor of (source rank, source
row).  combine(h, partials) is its inverse: partials holds one row per row
received, in that order, and the owner of each source row gets the reduction
over exactly the ranks in its mask row (the others in ascending rank order,
its own last; zeros where the row went nowhere), [T, ...] in its row order.

Capacity: the rows land in out= (its rows are the capacity) or in a tensor
this module allocates.  Without out= it guesses (the larger of T and the last
R this communicator received); when any rank's guess is short, the library
fails the dispatch on every rank alike with INCMOE_ERR_NO_MEMORY and tells
each rank its exact R, so every rank retries once, together, with what it
needs (Dispatch.attempts is 2 then).  A rank whose out= is short takes part
in the retry as a refusal: a ValueError there, IncmoeError elsewhere.  The
retry is posted from inside the first post's wait(), so a dispatch (or
all_to_all_single) posted while another is in flight first completes that
one (Communicator._settle_dispatch): every rank then posts the retry in the
same place of the dispatch stream.

Bad input (a mask of the wrong shape or dtype, partials whose rows do not
match the dispatch, ...) is a ValueError on that rank, raised after the rank
took part in the collective as a refusal (INCMOE_DISPATCH_PARAM_REFUSED), so
every other rank's matching call fails at once with an IncmoeError whose
reason names the rank and its reason, and the communicator stays usable.
"""

import ctypes
import math

import numpy
import torch

from . import _buffers, _errors, _lib
from ._work import Work, check_op


def _tensor(t, what):
    """t as a checked Buffer: a CPU, contiguous torch tensor of a type libincmoe knows."""
    if not isinstance(t, torch.Tensor):
        raise ValueError("%s is a %s: expected a CPU torch.Tensor" % (what, type(t).__name__))
    return _buffers.as_buffer(t, what)


def _overlap(a, b):
    return a.nbytes > 0 and b.nbytes > 0 and a.ptr < b.ptr + b.nbytes and b.ptr < a.ptr + a.nbytes


def _refusal_bytes(problem):
    """What the other ranks read of this rank's ValueError (the call's name is theirs too)."""
    text = str(problem)
    for call in ("dispatch: ", "combine: "):
        if text.startswith(call):
            text = text[len(call) :]
    return text.encode(errors="replace")[: _lib.REFUSAL_MAX - 1] or b"(no reason)"


def _req_reason(comm_ptr, req):
    """How a completed request ended: (status, reason)."""
    buf = ctypes.create_string_buffer(512)
    st = _lib.lib().incmoe_req_error(comm_ptr, ctypes.byref(req), buf, len(buf))
    return st, buf.value.decode(errors="replace")


def _refuse(comm, call, params_t, refused_flag, problem):
    """Posts call (incmoe_dispatch or incmoe_combine) refusing with problem's reason and waits
    for it: it fails on every rank; the library's status is not this rank's news, its
    ValueError is.  Returns the request."""
    req = _lib.req_t()
    p = params_t()
    p.field_mask = refused_flag
    p.refused = _refusal_bytes(problem)
    st = getattr(_lib.lib(), call)(comm._handle(), ctypes.byref(p), ctypes.byref(req))
    _errors.check(call, st, comm._ptr)
    _lib.lib().incmoe_wait(comm._handle(), ctypes.byref(req))
    return req


class Dispatch:
    """A dispatch (Communicator.dispatch): once completed, rows ([R, ...], x's dtype and row
    shape) and source (int64 [R, 2]: source rank, source row), and len() == R.

    The library keeps what it needs to combine the dispatch (its sets, plan and sources)
    until a combine of it completes; a dispatch that will never be combined should be
    released (release(), or dropping the last reference to it), as the library keeps at most
    1024 per communicator.  attempts: how many posts it took (2 after a capacity retry)."""

    def __init__(self, comm, nrows, row_shape, dtype):
        self._comm = comm
        self._req = None
        self._state = "posted"  # posted -> done -> combined | released, or posted -> failed
        self._combining = False
        self._rows = None
        self._source = None
        self.nrows_sent = nrows  # T: the rows of x
        self.row_shape = row_shape
        self.dtype = dtype
        self.attempts = 0

    def _done(self, what, attr="_rows"):
        if self._state == "posted":
            raise RuntimeError("%s: the dispatch has not completed (wait() for its work)" % what)
        if self._state == "failed":
            raise RuntimeError("%s: the dispatch failed (its work's wait() says why)" % what)
        return getattr(self, attr)

    @property
    def rows(self):
        return self._done("rows")

    @property
    def source(self):
        return self._done("source", "_source")

    @property
    def completed(self):
        return self._state != "posted"

    def __len__(self):
        return self._done("len").shape[0]

    def release(self):
        """Free what the library keeps of this dispatch (never combined); idempotent once it
        completed.  Before that, or while a combine of it is in flight, an error."""
        if self._state == "posted":
            raise RuntimeError("release: the dispatch has not completed (wait() for its work)")
        if self._combining:
            raise RuntimeError("release: a combine of this dispatch is in flight")
        if self._state != "done":
            return
        self._state = "released"
        ptr = self._comm._ptr
        if ptr is not None:
            _lib.lib().incmoe_dispatch_release(ptr, ctypes.byref(self._req))

    def __del__(self):
        try:
            if self._state == "done" and not self._combining:
                self.release()
        except Exception:
            pass

    def __repr__(self):
        if self._state in ("posted", "failed"):
            return "<incmoe.Dispatch %s>" % ("in flight" if self._state == "posted" else "failed")
        return "<incmoe.Dispatch %d rows received of %s %s, %s>" % (
            self._rows.shape[0],
            tuple(self.row_shape),
            self.dtype,
            self._state,
        )


class _Call(Work):
    """A posted dispatch or combine whose completion does more than the C request: a dispatch
    may retry for capacity and then builds its handle; a failure alone raises IncmoeError
    with the request's own reason.  A failure is kept and raised again by every later wait()
    or is_completed(): the request it came from is gone (a failed dispatch is released)."""

    _failed = None

    def _end(self, st):
        """The request completed with st: True when the call is done, False when it posted
        again (and waits for that)."""
        raise NotImplementedError

    def _complete(self, st):
        try:
            if not self._end(st):
                return
        except BaseException as e:
            self._failed = e
            self._finish()
            raise
        self._finish()

    def is_completed(self):
        while not self._done:
            st = _lib.lib().incmoe_test(self._comm._handle(), ctypes.byref(self._req))
            if st == _lib.IN_PROGRESS:
                return False
            self._complete(st)
        if self._failed is not None:
            raise self._failed
        return True

    def wait(self, timeout=None):
        if timeout is not None:
            super().wait(timeout)  # polls is_completed
        while not self._done:
            st = _lib.lib().incmoe_wait(self._comm._handle(), ctypes.byref(self._req))
            self._complete(st)
        if self._failed is not None:
            raise self._failed
        return True

    def _raise(self, call, st):
        """A failure of this request: its reason, or the communicator's."""
        _, why = _req_reason(self._comm._handle(), self._req)
        raise _errors.IncmoeError(call, st, why or _errors.comm_reason(self._comm._ptr))


class DispatchWork(_Call):
    """Communicator.dispatch(..., async_op=True): handle is the Dispatch, complete once
    wait() returned (or is_completed() said True)."""

    def __init__(self, comm, handle, x, sets, row_bytes, out):
        super().__init__(comm, None, keep=(x.obj, out))
        self._done = False  # _post gives it its request
        self.handle = handle
        self._x, self._sets, self._row_bytes, self._out = x, sets, row_bytes, out
        self._buf = None
        self._refused = None  # the ValueError of a retry this rank refused

    def _post(self, capacity, refuse=None):
        comm = self._comm
        p = _lib.dispatch_params_t()
        if refuse is not None:
            p.field_mask = _lib.DISPATCH_PARAM_REFUSED
            p.refused = _refusal_bytes(refuse)
        else:
            h = self.handle
            if self._out is not None:
                self._buf = self._out
            else:
                self._buf = torch.empty((capacity,) + tuple(h.row_shape), dtype=h.dtype)
            b = _buffers.as_buffer(self._buf, "dispatch rows")
            p.send_mr, p.send_offset = comm._region(self._x if self._x.nbytes else comm._blank())
            p.recv_mr, p.recv_offset = comm._region(b if b.nbytes else comm._blank())
            p.nrows, p.row_bytes, p.capacity = h.nrows_sent, self._row_bytes, capacity
            p.sets = self._sets.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64))
        req = _lib.req_t()
        st = _lib.lib().incmoe_dispatch(comm._handle(), ctypes.byref(p), ctypes.byref(req))
        _errors.check("incmoe_dispatch", st, comm._ptr)
        self._req = req
        self._keep = (self._x.obj, self._out, self._buf)
        self.handle.attempts += 1

    def _finish(self):
        super()._finish()
        if self._comm._dc_pending is self:
            self._comm._dc_pending = None

    def _release_failed(self):
        _lib.lib().incmoe_dispatch_release(self._comm._handle(), ctypes.byref(self._req))

    def _end(self, st):
        comm = self._comm._handle()
        nrecv = ctypes.c_size_t()
        if st == _lib.Status.ERR_NO_MEMORY and self.handle.attempts == 1:
            # Every rank got the same capacity verdict (a failed communicator says so in
            # incmoe_comm_error instead): each learns its R and all post again together.
            rst = _lib.lib().incmoe_dispatch_result(
                comm, ctypes.byref(self._req), ctypes.byref(nrecv), None, 0
            )
            if rst == _lib.Status.ERR_NO_MEMORY and not _errors.comm_reason(comm):
                self._release_failed()
                need = nrecv.value
                if self._out is not None and self._out.shape[0] < need:
                    self._refused = ValueError(
                        "dispatch: out has %d rows, rank %d receives %d"
                        % (self._out.shape[0], self._comm.rank, need)
                    )
                    self._post(0, refuse=self._refused)
                else:
                    self._post(need if self._out is None else self._out.shape[0])
                return False
        if st != _lib.OK:
            self.handle._state = "failed"
            try:
                if self._refused is not None:
                    raise self._refused
                self._raise("incmoe_dispatch", st)
            finally:
                self._release_failed()
        n = ctypes.c_size_t()
        rst = _lib.lib().incmoe_dispatch_result(
            comm, ctypes.byref(self._req), ctypes.byref(n), None, 0
        )
        _errors.check("incmoe_dispatch_result", rst, comm)
        R = n.value
        src = numpy.zeros(2 * R + 2, dtype=numpy.uint32)
        rst = _lib.lib().incmoe_dispatch_result(
            comm,
            ctypes.byref(self._req),
            ctypes.byref(n),
            src.ctypes.data_as(ctypes.POINTER(ctypes.c_uint32)),
            R,
        )
        _errors.check("incmoe_dispatch_result", rst, comm)
        h = self.handle
        h._rows = self._buf[:R]
        h._source = torch.from_numpy(src[: 2 * R].astype(numpy.int64).reshape(R, 2))
        h._req = self._req
        h._state = "done"
        self._comm._dc_capacity = R
        return True


class CombineWork(_Call):
    """Communicator.combine(..., async_op=True): result is the [T, ...] tensor, complete
    once wait() returned (or is_completed() said True)."""

    def __init__(self, comm, req, handle, partials, out):
        super().__init__(comm, req, keep=(partials, out, handle))
        self.handle = handle
        self.result = out

    def _end(self, st):
        self.handle._combining = False
        if st != _lib.OK:
            self._raise("incmoe_combine", st)  # the dispatch stays: it may be combined again
        self.handle._state = "combined"  # the library released it
        return True


# ----------------------------------------------------------------------------- dispatch


def _sets_of(mask, nranks):
    """A bool [T, N] tensor as INCMOE_SET_WORDS(N) uint64 words a row: bit r % 64 of word
    r // 64 is mask[i, r]."""
    T = mask.shape[0]
    words = (nranks + 63) // 64
    bits = numpy.zeros((T, 64 * words), dtype=numpy.bool_)
    bits[:, :nranks] = mask.numpy()
    packed = numpy.packbits(bits, axis=1, bitorder="little")  # [T, 8 W]: bit r at byte r // 8
    return numpy.ascontiguousarray(packed).view("<u8").reshape(T, words).copy()


def _check_dispatch(comm, x, mask, out):
    xb = _tensor(x, "dispatch x")
    if x.dim() < 1:
        raise ValueError("dispatch: x is a scalar: expected [T, ...] rows")
    T, row_shape = x.shape[0], tuple(x.shape[1:])
    row_bytes = math.prod(row_shape) * x.element_size()
    if row_bytes == 0:
        raise ValueError("dispatch: x has shape %s: its rows have no elements" % (tuple(x.shape),))
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.device.type != "cpu":
        raise ValueError(
            "dispatch: mask is %s: expected a CPU torch.bool tensor [T, N]"
            % (
                ("a %s tensor on %s" % (mask.dtype, mask.device))
                if isinstance(mask, torch.Tensor)
                else "a %s" % type(mask).__name__
            )
        )
    if tuple(mask.shape) != (T, comm.nranks):
        raise ValueError(
            "dispatch: mask has shape %s, expected (%d, %d): x's rows by the ranks"
            % (tuple(mask.shape), T, comm.nranks)
        )
    if out is not None:
        ob = _tensor(out, "dispatch out")
        if out.dtype != x.dtype or out.dim() < 1 or tuple(out.shape[1:]) != row_shape:
            raise ValueError(
                "dispatch: out is %s %s, expected [capacity, %s] of x's %s"
                % (out.dtype, tuple(out.shape), ", ".join(map(str, row_shape)), x.dtype)
            )
        if _overlap(xb, ob):
            raise ValueError("dispatch: out overlaps x")
    return xb, T, row_shape, row_bytes


def dispatch(comm, x, mask, out=None, async_op=False):
    comm._handle()
    comm._settle_dispatch()
    try:
        xb, T, row_shape, row_bytes = _check_dispatch(comm, x, mask, out)
        sets = _sets_of(mask, comm.nranks)
    except ValueError as problem:
        req = _refuse(
            comm, "incmoe_dispatch", _lib.dispatch_params_t, _lib.DISPATCH_PARAM_REFUSED, problem
        )
        _lib.lib().incmoe_dispatch_release(comm._handle(), ctypes.byref(req))
        raise problem from None
    handle = Dispatch(comm, T, row_shape, x.dtype)
    work = DispatchWork(comm, handle, xb, sets, row_bytes, out)
    if out is not None:
        capacity = out.shape[0]
    else:
        capacity = max(T, comm._dc_capacity)
    work._post(capacity)
    comm._dc_pending = work  # also keeps x and out alive should the caller drop the work
    if async_op:
        return work
    work.wait()
    return handle


# ------------------------------------------------------------------------------ combine


def _check_combine(comm, h, partials, op, out):
    if not isinstance(h, Dispatch) or h._comm is not comm:
        raise ValueError("combine: h is not a Dispatch of this communicator")
    if h._state != "done" or h._combining:
        raise ValueError(
            "combine: the dispatch is %s"
            % (
                "in a combine"
                if h._combining
                else {
                    "posted": "not completed",
                    "failed": "one that failed",
                    "combined": "combined already",
                    "released": "released",
                }[h._state]
            )
        )
    pb = _tensor(partials, "combine partials")
    R = len(h)
    if partials.dim() < 1 or partials.shape[0] != R:
        raise ValueError(
            "combine: partials has shape %s, expected [%d, ...]: one row per row the dispatch "
            "delivered" % (tuple(partials.shape), R)
        )
    row_shape = tuple(partials.shape[1:])
    row_count = math.prod(row_shape)
    if row_count == 0:
        raise ValueError(
            "combine: partials has shape %s: rows of no elements" % (tuple(partials.shape),)
        )
    check_op(op, pb.dtype, "combine")
    want = (h.nrows_sent,) + row_shape
    if out is None:
        out = torch.empty(want, dtype=partials.dtype)
    elif (
        not isinstance(out, torch.Tensor) or out.dtype != partials.dtype or tuple(out.shape) != want
    ):
        raise ValueError(
            "combine: out is %s, expected %s %s: the dispatch's rows by the partials' row"
            % (
                (
                    "%s %s" % (out.dtype, tuple(out.shape))
                    if isinstance(out, torch.Tensor)
                    else "a %s" % type(out).__name__
                ),
                partials.dtype,
                want,
            )
        )
    ob = _tensor(out, "combine out")
    if _overlap(pb, ob):
        raise ValueError("combine: out overlaps partials")
    return pb, ob, out, row_count


def combine(comm, h, partials, op="sum", out=None, async_op=False):
    comm._handle()
    try:
        pb, ob, out, row_count = _check_combine(comm, h, partials, op, out)
    except ValueError as problem:
        _refuse(comm, "incmoe_combine", _lib.combine_params_t, _lib.COMBINE_PARAM_REFUSED, problem)
        raise problem from None
    p = _lib.combine_params_t()
    p.dispatch = h._req
    p.send_mr, p.send_offset = comm._region(pb if pb.nbytes else comm._blank())
    p.recv_mr, p.recv_offset = comm._region(ob if ob.nbytes else comm._blank())
    p.row_count = row_count
    p.dtype = _lib.DTYPES[pb.dtype]
    p.op = _lib.REDOPS[op]
    req = _lib.req_t()
    st = _lib.lib().incmoe_combine(comm._handle(), ctypes.byref(p), ctypes.byref(req))
    _errors.check("incmoe_combine", st, comm._ptr)
    h._combining = True
    work = CombineWork(comm, req, h, partials, out)
    if async_op:
        return work
    work.wait()
    return out
