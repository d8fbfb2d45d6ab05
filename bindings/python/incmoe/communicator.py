"""incmoe.Communicator: a job of N ranks on an incmoe-switchd, and its collectives."""

import ctypes
import os
import threading

from . import _buffers, _children, _errors, _lib, _registry
from ._work import Work, check_op

_U64 = 1 << 64


class _RowsWork(Work):
    """The dispatch under an all_to_all_single: once it completed (or failed), released, and
    the rows each source sent checked against out_splits."""

    def __init__(self, comm, req, keep, out_splits):
        super().__init__(comm, req, keep)
        self._out_splits = out_splits
        self._released = False

    def _release(self):
        if not self._released and self._comm._ptr is not None:
            self._released = True
            _lib.lib().incmoe_dispatch_release(self._comm._ptr, ctypes.byref(self._req))

    def _finish(self):
        comm = self._comm._handle()
        rows = sum(self._out_splits)
        nrecv = ctypes.c_size_t()
        src = (ctypes.c_uint32 * (2 * rows + 2))()
        st = _lib.lib().incmoe_dispatch_result(
            comm, ctypes.byref(self._req), ctypes.byref(nrecv), src, rows
        )
        self._release()
        super()._finish()
        _errors.check("incmoe_dispatch_result", st, comm)
        got = [0] * len(self._out_splits)
        for k in range(min(nrecv.value, rows)):
            got[src[2 * k]] += 1
        if nrecv.value != rows or got != list(self._out_splits):
            raise ValueError(
                "all_to_all_single: received %s rows from the ranks, out_splits says %s"
                % (got if nrecv.value <= rows else "%d" % nrecv.value, list(self._out_splits))
            )

    def is_completed(self):
        try:
            return super().is_completed()
        except _errors.IncmoeError:
            self._release()
            raise

    def wait(self, timeout=None):
        try:
            return super().wait(timeout)
        except _errors.IncmoeError:
            self._release()
            raise


def _splits(splits, rows, n, what):
    """splits as a list of n row counts summing to rows; None or []: rows / n each."""
    if splits is None or len(splits) == 0:
        if rows % n != 0:
            raise ValueError(
                "all_to_all_single: %s has %d rows along dim 0, not divisible by %d ranks: give "
                "split sizes" % (what, rows, n)
            )
        return [rows // n] * n
    out = [int(k) for k in splits]
    if len(out) != n or any(k < 0 for k in out) or sum(out) != rows:
        raise ValueError(
            "all_to_all_single: %s splits %s: expected %d non-negative sizes summing to its %d "
            "rows" % (what, list(splits), n, rows)
        )
    return out


def _secret(auth_key):
    """auth_key: bytes or str is the key itself; an os.PathLike names a key file."""
    if auth_key is None:
        return None
    if isinstance(auth_key, os.PathLike):
        with open(auth_key, "rb") as f:
            data = f.read(_lib.MAX_SECRET + 3)
        key = data.split(b"\n", 1)[0].split(b"\r", 1)[0]
        where = "the first line of %s" % os.fspath(auth_key)
    elif isinstance(auth_key, str):
        key, where = auth_key.encode(), "auth_key"
    elif isinstance(auth_key, (bytes, bytearray)):
        key, where = bytes(auth_key), "auth_key"
    else:
        raise ValueError(
            "auth_key is a %s: expected bytes, str or a path (os.PathLike)"
            % type(auth_key).__name__
        )
    if not 1 <= len(key) <= _lib.MAX_SECRET:
        raise ValueError(
            "%s is %d bytes: a key is 1..%d bytes" % (where, len(key), _lib.MAX_SECRET)
        )
    return key


class Communicator:
    """One rank of a job on incmoe-switchd.

    switch: "host:port" of the switch; job: the job id (the same integer on
    every rank, 0..2**64-1); rank in 0..nranks-1; nranks 1..256; algo "inc"
    (the switch multicasts and reduces), "ring" (ranks exchange directly) or
    "a2a" (the ring's collectives, every rank connected to every other).
    auth_key: the shared secret as bytes or str, or a pathlib.Path / other
    os.PathLike naming a key file (its first line, as incmoe-switchd
    --auth-key-file reads it); None lets libincmoe read INCMOE_AUTH_KEY or
    INCMOE_AUTH_KEY_FILE.  timeout_ms bounds joining and is the liveness
    timeout asked of the switch (None: INCMOE_TIMEOUT_MS, else 10 s).
    progress_timeout_ms bounds each collective: how long the ranks that
    posted it wait for a live rank that has not (the job takes the largest
    any rank asked; None: the switch's --progress-timeout-ms).

    Every rank must issue the collectives of a kind in the same order.
    Arguments are checked before anything is posted: a ValueError leaves the
    communicator usable (the other ranks' matching call is then ended by the
    switch's progress timeout).  A collective that fails raises IncmoeError
    with incmoe_strerror's text and the communicator's reason; after that
    the communicator is failed and only close() is left.

    Registrations are cached per allocation (mr_cache entries, least
    recently used deregistered first); each entry keeps its memory's owner
    alive, so freed-and-reused memory is never served a stale registration.
    """

    def __init__(
        self,
        switch,
        job,
        rank,
        nranks,
        algo="inc",
        auth_key=None,
        timeout_ms=None,
        mr_cache=64,
        progress_timeout_ms=None,
    ):
        if not isinstance(switch, str) or ":" not in switch:
            raise ValueError("switch is %r: expected 'host:port'" % (switch,))
        if not isinstance(job, int) or not 0 <= job < _U64:
            raise ValueError("job is %r: expected an integer in 0..2**64-1" % (job,))
        if not isinstance(nranks, int) or not 1 <= nranks <= _lib.MAX_RANKS:
            raise ValueError("nranks is %r: expected 1..%d" % (nranks, _lib.MAX_RANKS))
        if not isinstance(rank, int) or not 0 <= rank < nranks:
            raise ValueError("rank is %r: expected 0..%d" % (rank, nranks - 1))
        if algo not in _lib.ALGOS:
            raise ValueError("algo is %r: expected one of %s" % (algo, ", ".join(_lib.ALGOS)))
        for name, v in (("timeout_ms", timeout_ms), ("progress_timeout_ms", progress_timeout_ms)):
            if v is not None and (not isinstance(v, int) or not 1 <= v <= 86400000):
                raise ValueError("%s is %r: expected 1..86400000" % (name, v))
        self._ptr = None
        self._close_lock = threading.Lock()
        self._children = _children.Children()
        key = _secret(auth_key)
        p = _lib.comm_params_t()
        p.field_mask = _lib.COMM_PARAM_ALGO
        p.switch_addr = switch.encode()
        p.job_id = job
        p.rank = rank
        p.nranks = nranks
        p.algo = _lib.ALGOS[algo]
        keybuf = None
        if key is not None:
            keybuf = ctypes.create_string_buffer(key, len(key))
            p.field_mask |= _lib.COMM_PARAM_SECRET
            p.secret = ctypes.cast(keybuf, ctypes.c_void_p)
            p.secret_len = len(key)
        if timeout_ms is not None:
            p.field_mask |= _lib.COMM_PARAM_TIMEOUT
            p.timeout_ms = timeout_ms
        if progress_timeout_ms is not None:
            p.field_mask |= _lib.COMM_PARAM_PROGRESS_TIMEOUT
            p.progress_timeout_ms = progress_timeout_ms
        ptr = ctypes.c_void_p()
        st = _lib.lib().incmoe_comm_create(ctypes.byref(p), ctypes.byref(ptr))
        _errors.check("incmoe_comm_create", st)
        self._attach(ptr, p, keybuf, switch, algo, mr_cache)

    def _attach(self, ptr, p, keybuf, switch, algo, mr_cache):
        """Own ptr, a communicator made from p (its job, rank and size read back)."""
        self._ptr = ptr
        # What the MoE layer's other-algorithm communicators are made from (incmoe_moe_path_t).
        self._params = (p, keybuf)
        self._mr_cache = mr_cache
        self.switch, self.algo = switch, algo
        self.job = _lib.lib().incmoe_comm_job_id(ptr)
        self.rank = _lib.lib().incmoe_comm_rank(ptr)
        self.nranks = _lib.lib().incmoe_comm_nranks(ptr)
        self._mrs = _registry.Registry(ptr, mr_cache)
        self._dc_capacity = 0  # the rows the last dispatch delivered: the next one's guess
        self._dc_pending = None  # the dispatch (incmoe.dispatch) in flight, if any

    def shrink(self):
        """A new Communicator of the ranks that survive this one's lost ranks
        (incmoe_comm_shrink): every survivor calls it, after a collective raised
        for a lost rank or on request with none lost.  Survivors are renumbered
        densely in ascending old rank order (the new one's rank and nranks say
        how); the same switch, key, algorithm and timeouts.  This communicator
        stays yours to close.  Raises IncmoeError with the reason when the shrink
        fails (a rank lost after it asked, the job's timeout, a job over a switch
        tree); this communicator then reports that reason."""
        h = self._handle()
        ptr = ctypes.c_void_p()
        st = _lib.lib().incmoe_comm_shrink(h, ctypes.byref(ptr))
        _errors.check("incmoe_comm_shrink", st, h)
        new = Communicator.__new__(Communicator)
        new._close_lock = threading.Lock()
        new._children = _children.Children()
        new._ptr = None
        old = self._params[0]
        p = _lib.comm_params_t()  # the old one's fields, each set anew (its pointers kept alive)
        p.switch_addr = self.switch.encode()
        for f in ("field_mask", "secret", "secret_len", "algo", "timeout_ms", "progress_timeout_ms"):
            setattr(p, f, getattr(old, f))
        p.job_id = _lib.lib().incmoe_comm_job_id(ptr)
        p.rank = _lib.lib().incmoe_comm_rank(ptr)
        p.nranks = _lib.lib().incmoe_comm_nranks(ptr)
        new._attach(ptr, p, self._params[1], self.switch, self.algo, self._mr_cache)
        return new

    # ------------------------------------------------------------ lifecycle

    def _handle(self):
        if self._ptr is None:
            raise _errors.IncmoeError("incmoe communicator", _lib.ERR_CLOSED, "closed")
        return self._ptr

    @property
    def closed(self):
        return self._ptr is None

    def error(self):
        """The communicator's first error text, "" while it is healthy."""
        return _errors.comm_reason(self._ptr)

    def close(self):
        """Leave the job (incmoe_comm_destroy: waits for this rank's collectives,
        bounded by the job's timeout), closing first the incmoe.MoE layers
        built on it.  Raises IncmoeError if the communicator had failed or
        collectives had to be abandoned; closed either way.
        The context manager closes the same way; a communicator that is only
        dropped is released without waiting (see __del__)."""
        with self._close_lock:
            if self._ptr is None:
                return
            ptr, self._ptr = self._ptr, None
            reason = _errors.comm_reason(ptr)
            self._children.close_all()  # their destroy deregisters through ptr
            st = _lib.lib().incmoe_comm_destroy(ptr)
            # Only now: the registrations' owners kept the memory of collectives in flight.
            self._mrs.forget()
            if st < 0:
                raise _errors.IncmoeError("incmoe_comm_destroy", st, reason)

    def clear_cache(self):
        """Deregister every cached registration not used by a collective in flight."""
        self._handle()
        self._mrs.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        """A communicator dropped without close() (at interpreter exit, say) must not
        block for a job timeout: incmoe_comm_release abandons what is in flight at
        once (the other ranks' collectives fail naming this rank) and returns."""
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr is None:
            return
        try:
            try:
                self._children.close_all()
            finally:
                _lib.lib().incmoe_comm_release(ptr)
                self._mrs.forget()
        except Exception:
            pass

    def _adopt(self, ptr, destroy):
        """Own a C object built on this communicator (see _children): destroy(ptr)
        runs before the communicator goes, whatever order Python frees them in."""
        self._handle()
        return self._children.adopt(ptr, destroy)

    def _release(self, h):
        """Destroy an adopted object now, unless this communicator already did."""
        return self._children.release(h)

    # ---------------------------------------------------------- collectives

    def _region(self, buf):
        return self._mrs.region(buf)

    def _blocks(self, call, out, inp, whole):
        """out and inp of call as buffers, (o, i): one dtype, and the one named whole ("output"
        or "input") holding nranks blocks of the other's elements."""
        i = _buffers.as_buffer(inp, "%s input" % call)
        o = _buffers.as_buffer(out, "%s output" % call)
        if o.dtype != i.dtype:
            raise ValueError(
                "%s: output dtype %s differs from input dtype %s" % (call, o.dtype, i.dtype)
            )
        w, b, t, block = (o, i, out, "input") if whole == "output" else (i, o, inp, "output")
        if w.numel != self.nranks * b.numel:
            raise ValueError(
                "%s: %s has %d elements (shape %s), expected nranks x %s = %d x %d"
                % (call, whole, w.numel, tuple(t.shape), block, self.nranks, b.numel)
            )
        return o, i

    def all_gather(self, out, inp, async_op=False):
        """out (N * inp.numel() elements, inp's dtype) receives every rank's inp, in rank order."""
        comm = self._handle()
        o, i = self._blocks("all_gather", out, inp, "output")
        return self._allgather(comm, o, i, [i.nbytes] * self.nranks, 0, async_op)

    def broadcast(self, t, root=0, async_op=False):
        """Every rank's t gets root's t: an AllGather in which only root's block has bytes."""
        comm = self._handle()
        if not isinstance(root, int) or not 0 <= root < self.nranks:
            raise ValueError("broadcast: root is %r, expected 0..%d" % (root, self.nranks - 1))
        b = _buffers.as_buffer(t, "broadcast tensor")
        valid = [b.nbytes if r == root else 0 for r in range(self.nranks)]
        # Rank s's block sits at recv_offset + s * stride: shifting the base back
        # by root blocks puts root's block on t itself (the offset wraps, as the
        # layout allows; no block other than root's moves a byte).
        return self._allgather(comm, b, b, valid, -root * b.nbytes, async_op)

    def _allgather(self, comm, o, i, valid, shift, async_op):
        if i.nbytes == 0 and o.nbytes == 0:
            return self._finish(Work(self), async_op)
        smr, soff = self._region(i)
        rmr, roff = self._region(o)
        lay = _lib.layout_t()
        lay.block_stride = max(valid) if valid else 0
        lay.offset = 0
        lay.length = lay.block_stride
        arr = (ctypes.c_size_t * self.nranks)(*valid)
        lay.valid = arr
        args = (smr, soff, rmr, (roff + shift) % _U64, ctypes.byref(lay))
        return self._post("incmoe_allgather", comm, args, (o.obj, i.obj), async_op)

    def reduce_scatter(self, out, inp, op="sum", async_op=False):
        """out gets this rank's share (block `rank` of inp's N blocks) reduced over the ranks."""
        comm = self._handle()
        o, i = self._blocks("reduce_scatter", out, inp, "input")
        check_op(op, i.dtype, "reduce_scatter")
        if o.nbytes == 0:
            return self._finish(Work(self), async_op)
        smr, soff = self._region(i)
        rmr, roff = self._region(o)
        lay = _lib.layout_t()
        lay.block_stride = o.nbytes
        lay.offset = 0
        lay.length = o.nbytes
        args = (smr, soff, rmr, roff, ctypes.byref(lay), _lib.DTYPES[i.dtype], _lib.REDOPS[op])
        return self._post("incmoe_reducescatter", comm, args, (o.obj, i.obj), async_op)

    def all_reduce(self, t, op="sum", async_op=False):
        """t becomes the element-wise reduction of every rank's t (in place)."""
        comm = self._handle()
        b = _buffers.as_buffer(t, "all_reduce tensor")
        check_op(op, b.dtype, "all_reduce")
        if b.nbytes == 0:
            return self._finish(Work(self), async_op)
        mr, off = self._region(b)
        args = (mr, off, mr, off, b.numel, _lib.DTYPES[b.dtype], _lib.REDOPS[op])
        return self._post("incmoe_allreduce", comm, args, (b.obj,), async_op)

    def barrier(self, async_op=False):
        comm = self._handle()
        return self._post("incmoe_barrier", comm, (), (), async_op)

    def _settle_dispatch(self):
        """Complete the dispatch of this communicator still in flight, if any, before another
        dispatch (or all_to_all_single) is posted: a capacity retry posts again from inside
        its wait(), and that post must take the same place in every rank's order of the
        dispatch stream, which a wait one rank makes before its next post and another after
        it would not give."""
        w, self._dc_pending = self._dc_pending, None
        if w is not None:
            try:
                w.wait()
            except Exception:
                pass  # w keeps it: its own wait() raises it

    def dispatch(self, x, mask, out=None, async_op=False):
        """Row i of x ([T, ...], a CPU tensor) goes to every rank r with mask[i, r] (a bool
        [T, N] tensor), this rank included; returns an incmoe.Dispatch: .rows, the [R, ...]
        rows this rank received (by source rank, then source row; a view of out= when
        given, whose rows are the capacity), and .source, int64 [R, 2] (source rank, source
        row).  Without out= the capacity is guessed and, when any rank's is short, every
        rank retries once with its exact R.  async_op=True returns a DispatchWork whose
        .handle is complete once wait() returned; a dispatch posted while another is in
        flight first waits for that one.  Bad input is a ValueError here and fails the
        others' dispatch with this rank's reason (see incmoe.dispatch)."""
        from . import dispatch as _dc

        return _dc.dispatch(self, x, mask, out, async_op)

    def combine(self, h, partials, op="sum", out=None, async_op=False):
        """The inverse of dispatch h: partials holds one row per row h received ([R, ...],
        in h.rows' order); returns the [T, ...] tensor (out= if given) in which each of this
        rank's rows of the dispatch is op over the partials of exactly the ranks its mask
        row named, the others' in ascending rank order and this rank's own last (zeros for
        a row that went nowhere).  A completed combine frees h.  async_op=True returns a
        CombineWork whose .result is complete once wait() returned."""
        from . import dispatch as _dc

        return _dc.combine(self, h, partials, op, out, async_op)

    def all_to_all_single(self, out, inp, out_splits=None, in_splits=None, async_op=False):
        """Rows along dim 0: in_splits[d] rows of inp go to rank d, in order; out gets
        out_splits[s] rows from each rank s, in rank order (None: equal splits).  inp and
        out agree in dtype and in every dimension but the first.  A dispatch whose rows each
        go to one rank: point to point on the ring and a2a algorithms, through the switch on
        inc."""
        comm = self._handle()
        i = _buffers.as_buffer(inp, "all_to_all_single input")
        o = _buffers.as_buffer(out, "all_to_all_single output")
        ishape, oshape = tuple(inp.shape), tuple(out.shape)
        if o.dtype != i.dtype or len(ishape) < 1 or ishape[1:] != oshape[1:]:
            raise ValueError(
                "all_to_all_single: input %s %s and output %s %s must have one dtype and the "
                "same shape past dim 0" % (i.dtype, ishape, o.dtype, oshape)
            )
        isp = _splits(in_splits, ishape[0], self.nranks, "input")
        osp = _splits(out_splits, oshape[0], self.nranks, "output")
        row_bytes = _lib.lib().incmoe_dtype_size(_lib.DTYPES[i.dtype])
        for k in ishape[1:]:
            row_bytes *= k
        if row_bytes == 0:  # rows without bytes: nothing moves, on any rank
            return self._finish(Work(self), async_op)
        self._settle_dispatch()
        words = (self.nranks + 63) // 64
        sets = (ctypes.c_uint64 * max(1, ishape[0] * words))()
        row = 0
        for d, k in enumerate(isp):
            for r in range(row, row + k):
                sets[r * words + d // 64] = 1 << (d % 64)
            row += k
        p = _lib.dispatch_params_t()
        p.send_mr, p.send_offset = self._region(i if i.nbytes else self._blank())
        p.recv_mr, p.recv_offset = self._region(o if o.nbytes else self._blank())
        p.nrows, p.row_bytes, p.capacity = ishape[0], row_bytes, oshape[0]
        p.sets = ctypes.cast(sets, ctypes.POINTER(ctypes.c_uint64))
        req = _lib.req_t()
        st = _lib.lib().incmoe_dispatch(comm, ctypes.byref(p), ctypes.byref(req))
        _errors.check("incmoe_dispatch", st, comm)
        return self._finish(_RowsWork(self, req, (o.obj, i.obj), osp), async_op)

    def _blank(self):
        """A registered buffer of a few bytes, for a range of none."""
        if getattr(self, "_blank_buf", None) is None:
            self._blank_buf = _buffers.as_buffer(_buffers.blank(8), "blank")
        return self._blank_buf

    def _post(self, call, comm, args, keep, async_op):
        """Posts the collective call(comm, *args, &req) and hands back its Work, waited for
        unless async_op; keep: what the Work holds until it completes."""
        req = _lib.req_t()
        st = getattr(_lib.lib(), call)(comm, *args, ctypes.byref(req))
        _errors.check(call, st, comm)
        return self._finish(Work(self, req, keep), async_op)

    @staticmethod
    def _finish(work, async_op):
        if async_op:
            return work
        work.wait()
        return None

    def __repr__(self):
        state = "closed" if self._ptr is None else "open"
        return "<incmoe.Communicator rank %d/%d job %d algo=%s on %s, %s>" % (
            self.rank,
            self.nranks,
            self.job,
            self.algo,
            self.switch,
            state,
        )
