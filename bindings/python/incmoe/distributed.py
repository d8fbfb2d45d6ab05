"""The torch.distributed backend "incmoe" (registered when incmoe is imported).

    import incmoe, torch.distributed as dist
    dist.init_process_group("incmoe", rank=r, world_size=n)   # INCMOE_SWITCH=host:port

Each process group (the default one and every new_group) is one incmoe job:
its rank 0 draws a random job id and publishes it in the group's torch store,
the others read it there, and every rank joins the switch named by
INCMOE_SWITCH with the algorithm named by INCMOE_ALGO ("inc", the default,
"ring" or "a2a").  The key, if the switch asks for one, comes from INCMOE_AUTH_KEY or
INCMOE_AUTH_KEY_FILE as for every libincmoe program.

init_process_group's timeout bounds each collective: it is the job's progress
timeout (how long the ranks that posted a collective wait for a live rank
that has not; then IncmoeError on every rank), asked of the switch in place
of its --progress-timeout-ms.  A dead rank is still found by the liveness
timeout (INCMOE_TIMEOUT_MS, 10 s by default), whatever this timeout is.

In-network for CPU tensors: all_reduce (sum, max, min; product where the
switch reduces the type), all_gather_into_tensor, reduce_scatter_tensor,
all_gather and reduce_scatter (lists), broadcast (an AllGather in which only
the root's block has bytes), barrier; all_to_all_single (a dispatch: point to
point on the ring and a2a algorithms, through the switch on inc).  Every other call raises
NotImplementedError naming what is supported; CUDA tensors raise ValueError
pointing to NCCL with NCCL_NET_PLUGIN=incmoe.  async_op=True returns a
Work whose wait() blocks until the collective is done and whose
get_future() completes on its own; torch's is_completed() cannot see a
Python backend's progress (see _Work).
"""

import os
import threading

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _C10dBackend
from torch._C._distributed_c10d import Work as _C10dWork

from . import _buffers, _lib
from .communicator import Communicator

NAME = "incmoe"
_JOB_KEY = "incmoe/job_id"

SUPPORTED = (
    "all_reduce, all_gather_into_tensor, reduce_scatter_tensor, all_gather, reduce_scatter, "
    "broadcast, barrier, all_to_all_single"
)

_REDOPS = {
    dist.ReduceOp.SUM: "sum",
    dist.ReduceOp.MAX: "max",
    dist.ReduceOp.MIN: "min",
    dist.ReduceOp.PRODUCT: "prod",
}


def _redop(opts_op, call):
    for k, v in _REDOPS.items():
        if opts_op == k:
            return v
    raise ValueError(
        "%s: the incmoe backend reduces with SUM, MAX, MIN (and PRODUCT where the switch "
        "supports the type), not %s" % (call, opts_op)
    )


class _Work(_C10dWork):
    """A torch Work over an incmoe.Work; `after` (staging copies) runs once it completed.

    torch hands a Python backend's Work to the caller inside a holder that
    forwards only wait() and get_future() (torch 2.x's PyWorkHolder), so
    those two are what this class provides; the holder's is_completed()
    is torch's own and stays False.  Poll get_future().done() instead.
    """

    def __init__(self, inner, result, after=None):
        super().__init__()
        self._inner = inner
        self._result = result
        self._after = after
        self._lock = threading.Lock()
        self._finished = False
        self._error = None
        self._future = None

    def _complete(self):
        with self._lock:
            if self._finished:
                return
            self._finished = True
            if self._after is not None:
                self._after()

    def wait(self, timeout=None):
        """timeout: a timedelta from torch; zero (torch's kNoTimeout) or None waits for good."""
        if self._error is not None:
            raise self._error
        secs = timeout.total_seconds() if timeout is not None else 0
        try:
            self._inner.wait(timeout=secs if secs > 0 else None)
        except TimeoutError:
            raise
        except Exception as e:
            self._error = e
            raise
        self._complete()
        return True

    def get_future(self):
        """A torch.futures.Future completed by a helper thread once the collective is."""
        with self._lock:
            if self._future is None:
                self._future = torch.futures.Future()
                threading.Thread(target=self._settle, daemon=True).start()
            return self._future

    def _settle(self):
        try:
            self.wait()
        except Exception as e:
            self._future.set_exception(e)
        else:
            self._future.set_result(self._result)


class _Staging:
    """Byte buffers reused across collectives (registered once each), for the
    list forms whose tensors are not one contiguous block."""

    def __init__(self):
        self._free = {}
        self._lock = threading.Lock()

    def take(self, nbytes):
        with self._lock:
            pool = self._free.get(nbytes)
            if pool:
                return pool.pop()
        return torch.empty(nbytes, dtype=torch.uint8)

    def give(self, buf):
        with self._lock:
            self._free.setdefault(buf.numel(), []).append(buf)


def _cpu(t, call):
    dev = t.device
    if dev.type != "cpu" or getattr(t, "is_cuda", False):
        raise ValueError("%s: tensor on device '%s': %s" % (call, dev, _buffers.GPU_HINT))


def _one(tensors, call):
    if len(tensors) != 1:
        raise ValueError("%s: the incmoe backend takes one tensor per call, got %d" % (call, len(tensors)))
    _cpu(tensors[0], call)
    return tensors[0]


def _progress_timeout_ms(timeout):
    """torch's timeout (a timedelta) in ms for the switch, 1..86400000; None: the switch's."""
    if timeout is None or timeout.total_seconds() <= 0:
        return None
    return min(max(int(timeout.total_seconds() * 1000), 1), 86400000)


def _agree_job(store, rank):
    """Rank 0 of the group draws the job id; the group's store hands it to the others."""
    if rank == 0:
        job = int.from_bytes(os.urandom(8), "little") >> 1
        store.set(_JOB_KEY, str(job))
        return job
    return int(store.get(_JOB_KEY).decode())


class IncmoeBackend(_C10dBackend):
    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        switch = os.environ.get("INCMOE_SWITCH")
        if not switch:
            raise ValueError(
                "the incmoe backend needs INCMOE_SWITCH=host:port of a running incmoe-switchd"
            )
        algo = os.environ.get("INCMOE_ALGO", "inc")
        if algo not in _lib.ALGOS:
            raise ValueError("INCMOE_ALGO=%s: expected one of %s" % (algo, ", ".join(_lib.ALGOS)))
        self.job = _agree_job(store, rank)
        progress_ms = _progress_timeout_ms(timeout)
        self.comm = Communicator(
            switch, self.job, rank, size, algo=algo, progress_timeout_ms=progress_ms
        )
        self._staging = _Staging()

    def getBackendName(self):
        return NAME

    def _work(self, inner, result, after=None):
        return _Work(inner, result, after)

    # ------------------------------------------------------- the collectives

    def allreduce(self, tensors, opts=None):
        t = _one(tensors, "all_reduce")
        op = _redop(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "all_reduce")
        return self._work(self.comm.all_reduce(t, op=op, async_op=True), tensors)

    def _allgather_base(self, output, input, opts=None):
        _cpu(output, "all_gather_into_tensor")
        _cpu(input, "all_gather_into_tensor")
        return self._work(self.comm.all_gather(output, input, async_op=True), [output])

    all_gather_single = _allgather_base

    def _reduce_scatter_base(self, output, input, opts=None):
        _cpu(output, "reduce_scatter_tensor")
        _cpu(input, "reduce_scatter_tensor")
        op = _redop(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "reduce_scatter_tensor")
        return self._work(self.comm.reduce_scatter(output, input, op=op, async_op=True), [output])

    reduce_scatter_single = _reduce_scatter_base

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        """all_to_all_single: a dispatch whose rows each go to one rank."""
        _cpu(output, "all_to_all_single")
        _cpu(input, "all_to_all_single")
        inner = self.comm.all_to_all_single(
            output, input, output_split_sizes, input_split_sizes, async_op=True
        )
        return self._work(inner, [output])

    all_to_all_single = alltoall_base

    def allgather(self, output_tensors, input_tensors, opts=None):
        inp = _one(input_tensors, "all_gather")
        if len(output_tensors) != 1 or len(output_tensors[0]) != self.size():
            raise ValueError("all_gather: expected one list of %d output tensors" % self.size())
        outs = output_tensors[0]
        for i, o in enumerate(outs):
            _cpu(o, "all_gather")
            if o.dtype != inp.dtype or o.numel() != inp.numel():
                raise ValueError(
                    "all_gather: output %d is %s %s, expected the input's %s %s"
                    % (i, o.dtype, tuple(o.shape), inp.dtype, tuple(inp.shape))
                )
        nbytes = inp.numel() * inp.element_size()
        buf = self._staging.take(nbytes * self.size())
        flat = buf.view(inp.dtype) if nbytes else buf[:0].view(inp.dtype)

        def scatter_out():
            for r, o in enumerate(outs):
                o.copy_(flat[r * inp.numel() : (r + 1) * inp.numel()].view(o.shape))
            self._staging.give(buf)

        inner = self.comm.all_gather(flat, inp.contiguous(), async_op=True)
        return self._work(inner, output_tensors, scatter_out)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        out = _one(output_tensors, "reduce_scatter")
        if len(input_tensors) != 1 or len(input_tensors[0]) != self.size():
            raise ValueError("reduce_scatter: expected one list of %d input tensors" % self.size())
        ins = input_tensors[0]
        for i, t in enumerate(ins):
            _cpu(t, "reduce_scatter")
            if t.dtype != out.dtype or t.numel() != out.numel():
                raise ValueError(
                    "reduce_scatter: input %d is %s %s, expected the output's %s %s"
                    % (i, t.dtype, tuple(t.shape), out.dtype, tuple(out.shape))
                )
        op = _redop(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "reduce_scatter")
        nbytes = out.numel() * out.element_size()
        buf = self._staging.take(nbytes * self.size())
        flat = buf.view(out.dtype) if nbytes else buf[:0].view(out.dtype)
        for r, t in enumerate(ins):
            flat[r * out.numel() : (r + 1) * out.numel()].copy_(t.reshape(-1))
        inner = self.comm.reduce_scatter(out, flat, op=op, async_op=True)
        return self._work(inner, output_tensors, lambda: self._staging.give(buf))

    def broadcast(self, tensors, opts=None):
        t = _one(tensors, "broadcast")
        root = opts.rootRank if opts is not None else 0
        return self._work(self.comm.broadcast(t, root=root, async_op=True), tensors)

    def barrier(self, opts=None):
        return self._work(self.comm.barrier(async_op=True), [])

    def shutdown(self):
        self.comm.close()

    # ------------------------------------------------- what is not in-network

    def _unsupported(self, call):
        raise NotImplementedError(
            "the incmoe backend does not implement %s; it runs %s on CPU tensors (use gloo, "
            "or NCCL with NCCL_NET_PLUGIN=incmoe on GPUs, for the rest)" % (call, SUPPORTED)
        )

    def send(self, *a, **k):
        self._unsupported("send")

    def recv(self, *a, **k):
        self._unsupported("recv")

    def recv_anysource(self, *a, **k):
        self._unsupported("recv_anysource")

    def reduce(self, *a, **k):
        self._unsupported("reduce")

    def gather(self, *a, **k):
        self._unsupported("gather")

    def scatter(self, *a, **k):
        self._unsupported("scatter")

    def alltoall(self, *a, **k):
        self._unsupported("all_to_all")


    def allreduce_coalesced(self, *a, **k):
        self._unsupported("all_reduce_coalesced")

    def allgather_coalesced(self, *a, **k):
        self._unsupported("all_gather_coalesced")

    def monitored_barrier(self, *a, **k):
        self._unsupported("monitored_barrier")


def communicator(group=None):
    """The incmoe.Communicator under a process group of the "incmoe" backend
    (None: the default group), for calls that take one (incmoe.MoE,
    incmoe.hf.expert_parallel).  The group owns it: it closes with the group."""
    if not dist.is_initialized():
        raise ValueError("communicator: torch.distributed is not initialized (init_process_group first)")
    if group is None:
        group = dist.group.WORLD
    backend = dist.get_backend(group)
    if backend != NAME:
        raise ValueError("communicator: the group's backend is %r, not %r" % (backend, NAME))
    impl = group._get_backend(torch.device("cpu"))
    if not isinstance(impl, IncmoeBackend):
        raise ValueError("communicator: the group's CPU backend is a %s, not incmoe's" % type(impl).__name__)
    return impl.comm


def _create(store, rank, size, timeout):
    return IncmoeBackend(store, rank, size, timeout)


def register():
    """Registers "incmoe" with torch.distributed (done on import; idempotent)."""
    if NAME.upper() not in dist.Backend._plugins:
        # "cuda" too, so CUDA tensors reach this backend and get its error
        # naming NCCL instead of a bare "no backend for cuda".
        dist.Backend.register_backend(NAME, _create, devices=["cpu", "cuda"])


register()
