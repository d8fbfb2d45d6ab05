"""incmoe.MoE: the INC-MoE layer (libincmoe_moe) as a torch.nn.Module.

Weights come in vLLM's FusedMoE layout (also Hugging Face's fused experts):
w13 [E_local, 2I, H], the gate projection's I rows first, then the up
projection's; w2 [E_local, H, I].  libincmoe_moe takes w_gate and w_up
[E_local, I, H] and w_down [E_local, H, I] as separate arrays, so w13 is
split once at construction (w2 is already the down layout) and the layer
copies them: later changes to the caller's tensors do not reach the layer.
"""

import ctypes
import dataclasses
import os

import torch

from . import _errors, _lib

_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
_MODES_TEXT = "'pipelined', 'baseline', 'auto' or 'decode'"


@dataclasses.dataclass(frozen=True)
class MoEConfig:
    """A pipelined forward's configuration (libincmoe_moe's automatic choice
    for the token counts, or the overrides given)."""

    nbands: int
    gather_workers: int
    compute_workers: int
    reduce_workers: int
    tail_bands: int
    text: str

    def __str__(self):
        return self.text


def _check_algo(algo):
    if algo is not None and algo != "auto" and algo != "comm" and algo not in _lib.ALGOS:
        raise ValueError("algo is %r: expected 'auto', 'comm', %s or None"
                         % (algo, ", ".join(repr(a) for a in _lib.ALGOS)))
    return algo


def _check_routing(routing):
    if routing is not None and routing not in _lib.MOE_ROUTINGS:
        raise ValueError("routing is %r: expected 'full', 'masked', 'auto' or None" % (routing,))
    return routing


def _with_team(config):
    """config, with compute_workers = torch's intra-op threads unless config or
    INCMOE_MOE_WORKERS names it: the layer's compute team runs its GEMMs while
    this thread waits in the forward, so it takes the cores torch's own pool
    would use at that moment instead of adding threads of its own."""
    cfg = dict(config or {})
    if "compute_workers" not in cfg and not os.environ.get("INCMOE_MOE_WORKERS"):
        cfg["compute_workers"] = max(1, min(torch.get_num_threads(), _lib.MOE_MAX_WORKERS))
    return cfg


def _check_decode_tokens(decode_tokens, max_tokens):
    """The decode capacity the layer gets: None the default, -1 none (0 here)."""
    if decode_tokens is None:
        return min(max_tokens, _lib.MOE_DECODE_TOKENS)
    if decode_tokens == -1:
        return 0
    if not isinstance(decode_tokens, int) or not 1 <= decode_tokens <= max_tokens:
        raise ValueError(
            "decode_tokens is %r: expected None, -1 (no decode step) or 1 .. max_tokens = %d"
            % (decode_tokens, max_tokens)
        )
    return decode_tokens


def _check_placement(placement, E, N):
    """placement as (offsets, ranks) lists: None, or E lists of ranks each (the ranks holding
    that expert).  Their order and distinctness are the C library's to check (it names the
    expert and the value); this checks what ctypes needs."""
    if placement is None:
        return None
    if not isinstance(placement, (list, tuple)) or len(placement) != E:
        raise ValueError("placement must be None or a list of num_experts = %d lists of ranks"
                         % E)
    offsets, ranks = [0], []
    for e, rs in enumerate(placement):
        if not isinstance(rs, (list, tuple)) or not rs or \
                not all(isinstance(r, int) and 0 <= r < N for r in rs):
            raise ValueError("placement[%d] is %r: expected a non-empty list of ranks in 0..%d"
                             % (e, rs, N - 1))
        ranks.extend(rs)
        offsets.append(len(ranks))
    return offsets, ranks


def _cpu_tensor(x, what):
    if not isinstance(x, torch.Tensor):
        raise ValueError("%s is a %s: expected a torch.Tensor" % (what, type(x).__name__))
    if x.device.type != "cpu" or getattr(x, "is_cuda", False):
        raise ValueError(
            "%s is on device '%s': incmoe.MoE runs the CPU backend and takes CPU tensors"
            % (what, x.device)
        )


class MoE(torch.nn.Module):
    """An expert-parallel SwiGLU MoE layer whose dispatch and combine are
    in-network AllGather and ReduceScatter (or the ring, as comm's algo), or
    with routing="masked" the routing-aware dispatch and combine: each token
    only to the ranks hosting one of its experts.

    comm: an incmoe.Communicator (it owns the layer: closing it closes the
    layer first, whichever of the two Python frees first; while a forward
    runs the layer owns comm's AllGather, ReduceScatter, barrier, dispatch
    and combine streams).
    Rank r hosts experts [r*E/N, (r+1)*E/N); E must be divisible by N.
    placement: None (that), or replicas: a list of E lists, placement[e] the
    ranks holding expert e (ascending, distinct, at least one; the same on
    every rank; any E).  Each (token, expert) pair is then served by one
    replica chosen per token (the C header's "Replicas"); the outputs equal
    the unreplicated layer's up to the order of their sums; w13 and w2 hold
    every expert this rank holds, ascending (E_local of them).
    w13 [E/N, 2I, H] (gate rows, then up rows), w2 [E/N, H, I]: CPU tensors,
    converted to dtype (default w13's) once.  mode: "pipelined" (bands of
    tokens, AllGather and ReduceScatter in flight together) or "baseline"
    (AllGather, every expert, ReduceScatter).  max_tokens bounds any rank's
    tokens per forward and sizes the layer's buffers.  config: optional
    overrides {nbands, gather_workers, compute_workers, reduce_workers,
    tail_bands}; compute_workers defaults to torch.get_num_threads() at
    construction (unless INCMOE_MOE_WORKERS is set); timeout_ms bounds every wait inside a forward (None: twice
    INCMOE_TIMEOUT_MS).  routing: "full" (every token to every rank),
    "masked" (dispatch and combine; the same outputs, bitwise in fp32
    in-network; an algorithm without them refuses it on every rank with
    IncmoeError) or "auto" (masked where it moves at most 90% of full's
    bytes and the algorithm has it, judged alike on every rank); None: the
    INCMOE_MOE_ROUTING setting (default full).  last_timing()["routing"]
    says which a forward ran.

    The path: mode="auto" measures baseline against pipelined (and routing
    "auto" masked against full) on a forward's own inputs and keeps the
    faster; algo="auto" also measures the in-network, ring and a2a
    algorithms, on communicators the layer holds on comm's switch (job ids
    derived from comm's), "inc"/"ring"/"a2a" forces one, None or "comm" runs
    comm's own.  With algo set, routing None is "auto".  Every rank chooses
    the same path; it is measured again when some rank's token count moves
    more than 2x from those of every choice the layer keeps (its last 8).
    layer.path says what the last forward ran.

    The decode step: a forward whose every rank's count is at most the
    layer's decode capacity (decode_tokens: None for min(max_tokens, 32), 1 ..
    max_tokens, or -1 for none; layer.decode_tokens says which) may run as
    one low-latency dispatch, the local experts and one low-latency combine,
    with no count exchange of its own (the C header's "Decode").  mode="decode"
    runs it for every forward that fits (larger ones run pipelined);
    mode="auto" with routing "masked" or "auto" measures it against the bulk
    paths where the counts fit and keeps the faster.  The rows are laid out by source rank (region s holds
    rank s's rows for this rank), each carrying its expert ids and weights.
    The layer's buffers are made and registered once, at construction; pass
    counts= and out= to run a step with no gather and no output allocation.

    Construction and every forward are collective: all ranks call them in
    the same order.  A rank whose arguments are refused raises ValueError,
    and the other ranks' matching call fails too (never waits forever).
    """

    def __init__(
        self,
        comm,
        num_experts,
        top_k,
        hidden_size,
        intermediate_size,
        w13,
        w2,
        dtype=None,
        mode="pipelined",
        max_tokens=1024,
        config=None,
        timeout_ms=None,
        routing=None,
        algo=None,
        decode_tokens=None,
        placement=None,
    ):
        super().__init__()
        lib = _lib.moe_lib()
        self.comm = comm
        self.num_experts, self.top_k = num_experts, top_k
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.max_tokens = max_tokens
        self._owned = None
        self._last_counts = None
        self.routing = None
        self.algo = None
        self.decode_tokens = decode_tokens
        self.placement = placement
        self._placed = None
        p = _lib.moe_params_t()
        lib.incmoe_moe_params_init(ctypes.byref(p))
        problem = None
        try:
            self._placed = _check_placement(placement, num_experts, comm.nranks) \
                if isinstance(num_experts, int) else None
            weights = self._check_init(
                num_experts, top_k, hidden_size, intermediate_size, w13, w2, dtype, mode, max_tokens
            )
            self.routing = _check_routing(routing)
            self.algo = _check_algo(algo)
            self.decode_tokens = _check_decode_tokens(decode_tokens, max_tokens)
            if self.algo is not None and self.routing is None:
                self.routing = "auto"
        except ValueError as e:
            problem, weights = e, None
        if problem is None:
            wg, wu, wd = weights
            p.num_experts, p.top_k = num_experts, top_k
            p.hidden, p.intermediate = hidden_size, intermediate_size
            p.dtype = _lib.DTYPES[_DTYPES[self.dtype]]
            p.max_tokens = max_tokens
            p.w_gate, p.w_up, p.w_down = wg.data_ptr(), wu.data_ptr(), wd.data_ptr()
            for k, v in _with_team(config).items():
                if not hasattr(p.config, k):
                    raise ValueError("config has no field %r" % k)
                setattr(p.config, k, int(v))
            if timeout_ms is not None:
                p.timeout_ms = timeout_ms
        else:
            # Still take part, with a shape every rank's check refuses, so the
            # other ranks' create fails instead of waiting for this one.
            p.num_experts = 0
        p.comm = comm._handle()
        ext = self._ext(problem)
        layer = ctypes.c_void_p()
        st = lib.incmoe_moe_create_ex(ctypes.byref(p), ext, ctypes.byref(layer))
        if problem is not None:
            raise problem
        _errors.check("incmoe_moe_create", st, comm._ptr)
        # The communicator owns the layer: it destroys it first if it closes first.
        self._owned = comm._adopt(layer, lib.incmoe_moe_destroy)
        self._counts = (ctypes.c_int * comm.nranks)()
        self._fwd = _lib.moe_forward_params_t()  # filled anew by every forward
        # A decode step's ids and weights converted in place of new tensors (_as).
        self._ids_buf = torch.empty(self.decode_tokens, top_k, dtype=torch.int32)
        self._w_buf = torch.empty(self.decode_tokens, top_k, dtype=torch.float32)
        # The token counts' AllGather: [T_r, refused] per rank, registered once.
        self._count_send = torch.zeros(2, dtype=torch.int32)
        self._count_recv = torch.zeros(2 * comm.nranks, dtype=torch.int32)

    def _ext(self, problem):
        """The create extension: the path when algo is given, and the decode capacity."""
        if problem is not None:
            return None
        ext = _lib.moe_params_ext_t()
        ext.field_mask = _lib.MOE_PARAM_DECODE
        ext.decode_tokens = self.decode_tokens if self.decode_tokens > 0 else -1
        if self._placed is not None:
            offsets, ranks = self._placed
            # Read during create only; kept on ext, which lives until create returns.
            ext._arrays = ((ctypes.c_int * len(offsets))(*offsets),
                           (ctypes.c_int * max(1, len(ranks)))(*ranks))
            ext._placement = _lib.moe_placement_t(ext._arrays[0], ext._arrays[1])
            ext.placement = ctypes.pointer(ext._placement)
            ext.field_mask |= _lib.MOE_PARAM_PLACEMENT
        if self.algo is None:
            return ctypes.byref(ext)
        ext.field_mask |= _lib.MOE_PARAM_PATH
        a = self.algo
        ext.path.algo = {"auto": _lib.MOE_ALGO_AUTO, "comm": _lib.MOE_ALGO_COMM}.get(
            a, _lib.ALGOS.get(a, 0))
        ext.path.mode = _lib.MOE_MODES[self.mode]
        ext.path.routing = _lib.MOE_ROUTINGS[self.routing]
        ext.path.comm_params = ctypes.pointer(self.comm._params[0])
        return ctypes.byref(ext)

    def _check_init(self, E, k, H, I, w13, w2, dtype, mode, max_tokens):
        N = self.comm.nranks
        for name, v in (("num_experts", E), ("top_k", k), ("hidden_size", H),
                        ("intermediate_size", I)):
            if not isinstance(v, int) or v < 1:
                raise ValueError("%s is %r: expected a positive integer" % (name, v))
        if k > E:
            raise ValueError("top_k is %d: at most num_experts = %d" % (k, E))
        if E % N != 0 and self._placed is None:
            raise ValueError("num_experts %d is not divisible by the %d ranks" % (E, N))
        if not isinstance(max_tokens, int) or max_tokens < 0:
            raise ValueError("max_tokens is %r: expected an integer >= 0" % (max_tokens,))
        if mode not in _lib.MOE_MODES:
            raise ValueError("mode is %r: expected %s" % (mode, _MODES_TEXT))
        self.mode = mode
        _cpu_tensor(w13, "w13")
        _cpu_tensor(w2, "w2")
        dtype = w13.dtype if dtype is None else dtype
        if dtype not in _DTYPES:
            raise ValueError("dtype is %s: expected torch.float32, float16 or bfloat16" % dtype)
        self.dtype = dtype
        el = E // N
        if self._placed is not None:
            el = sum(1 for rs in self.placement if self.comm.rank in rs)
        if tuple(w13.shape) != (el, 2 * I, H):
            raise ValueError(
                "w13 has shape %s, expected [E_local, 2*I, H] = [%d, %d, %d]"
                % (tuple(w13.shape), el, 2 * I, H)
            )
        if tuple(w2.shape) != (el, H, I):
            raise ValueError(
                "w2 has shape %s, expected [E_local, H, I] = [%d, %d, %d]"
                % (tuple(w2.shape), el, H, I)
            )
        for name, w in (("w13", w13), ("w2", w2)):
            if not w.dtype.is_floating_point:
                raise ValueError("%s has dtype %s: expected a floating type" % (name, w.dtype))
        with torch.no_grad():
            wg = w13[:, :I, :].to(dtype).contiguous()
            wu = w13[:, I:, :].to(dtype).contiguous()
            wd = w2.to(dtype).contiguous()
        return wg, wu, wd

    # ---------------------------------------------------------------- forward

    @staticmethod
    def _as(t, buf, dtype):
        """t as a contiguous dtype tensor: itself where it is one, else converted into the first
        rows of buf, the layer's own, where they hold it (a decode step's), else a new one."""
        if t.dtype == dtype and t.is_contiguous():
            return t
        if t.shape[0] <= buf.shape[0]:
            return buf[: t.shape[0]].copy_(t)
        return t.to(dtype).contiguous()

    def _check_forward(self, hidden, topk_ids, topk_weights, counts, out, mode, routing):
        H, k, E = self.hidden_size, self.top_k, self.num_experts
        if mode not in _lib.MOE_MODES:
            raise ValueError("mode is %r: expected %s" % (mode, _MODES_TEXT))
        _check_routing(routing)
        _cpu_tensor(hidden, "hidden")
        if hidden.dim() != 2 or hidden.shape[1] != H:
            raise ValueError("hidden has shape %s, expected [T, %d]" % (tuple(hidden.shape), H))
        if hidden.dtype != self.dtype:
            raise ValueError(
                "hidden has dtype %s, expected the layer's %s" % (hidden.dtype, self.dtype)
            )
        if not hidden.is_contiguous():
            raise ValueError("hidden is not contiguous: pass hidden.contiguous()")
        T = hidden.shape[0]
        if T > self.max_tokens:
            raise ValueError("hidden has %d tokens, more than max_tokens=%d" % (T, self.max_tokens))
        _cpu_tensor(topk_ids, "topk_ids")
        _cpu_tensor(topk_weights, "topk_weights")
        if tuple(topk_ids.shape) != (T, k):
            raise ValueError("topk_ids has shape %s, expected [%d, %d]" % (tuple(topk_ids.shape), T, k))
        if tuple(topk_weights.shape) != (T, k):
            raise ValueError(
                "topk_weights has shape %s, expected [%d, %d]" % (tuple(topk_weights.shape), T, k)
            )
        if topk_ids.dtype.is_floating_point or topk_ids.dtype.is_complex or topk_ids.dtype == torch.bool:
            raise ValueError("topk_ids has dtype %s, expected an integer type" % topk_ids.dtype)
        if not topk_weights.dtype.is_floating_point:
            raise ValueError("topk_weights has dtype %s, expected a floating type" % topk_weights.dtype)
        ids = self._as(topk_ids, self._ids_buf, torch.int32)
        if T:
            if int(ids.min()) < 0 or int(ids.max()) >= E:
                raise ValueError("topk_ids holds ids outside 0..%d" % (E - 1))
            s = ids.sort(dim=1).values
            if k > 1 and bool((s[:, 1:] == s[:, :-1]).any()):
                raise ValueError("topk_ids lists an expert twice for one token")
        w = self._as(topk_weights, self._w_buf, torch.float32)
        if out is not None:
            _cpu_tensor(out, "out")
            if tuple(out.shape) != (T, H) or out.dtype != self.dtype or not out.is_contiguous():
                raise ValueError(
                    "out is %s %s%s, expected a contiguous %s [%d, %d]"
                    % (out.dtype, tuple(out.shape), "" if out.is_contiguous() else " non-contiguous",
                       self.dtype, T, H)
                )
        if counts is not None:
            counts = [int(c) for c in counts]
            if len(counts) != self.comm.nranks:
                raise ValueError("counts has %d entries, expected one per rank (%d)" % (len(counts), self.comm.nranks))
            if counts[self.comm.rank] != T:
                raise ValueError(
                    "counts[%d] is %d but hidden has %d tokens" % (self.comm.rank, counts[self.comm.rank], T)
                )
        return ids, w, counts

    def _gather_counts(self, T, refused):
        self._count_send[0] = T
        self._count_send[1] = 1 if refused else 0
        self.comm.all_gather(self._count_recv, self._count_send)
        got = self._count_recv.view(-1, 2).tolist()
        return [c for c, _ in got], [r for r, (_, bad) in enumerate(got) if bad]

    def forward(self, hidden, topk_ids, topk_weights, counts=None, out=None, mode=None,
                routing=None):
        """[T_r, H] = sum over k of topk_weights * SwiGLU expert(hidden), per token.

        counts: every rank's token count (list of N ints, the same on every
        rank); None gathers them (one small AllGather).  out: a contiguous
        [T_r, H] tensor of the layer's dtype to write into; None: a new one.
        mode, routing: override the layer's for this call.
        """
        if self._layer is None:
            raise _errors.IncmoeError("incmoe_moe_forward_ex", _lib.ERR_CLOSED, "layer closed")
        mode = self.mode if mode is None else mode
        routing = self.routing if routing is None else routing
        lib = _lib.moe_lib()
        problem = None
        try:
            ids, w, counts = self._check_forward(hidden, topk_ids, topk_weights, counts, out, mode,
                                                 routing)
        except ValueError as e:
            problem = e
        T = hidden.shape[0] if problem is None else 0
        if counts is None:
            gathered, refused = self._gather_counts(T, problem is not None)
            if problem is not None:
                raise problem
            if refused:
                raise ValueError(
                    "rank(s) %s refused their forward arguments (their error says why)"
                    % ", ".join(map(str, refused))
                )
            counts = gathered
        f = self._fwd
        f.field_mask = _lib.MOE_FWD_MODE | _lib.MOE_FWD_COUNTS
        if problem is not None:
            # Counts were given, so the ranks meet first in the layer's own
            # forward: refused, with the mode, routing and counts the others
            # choose their path from, it fails on every rank.
            self._refuse(f, problem, counts, mode, routing)
            raise problem
        for r, c in enumerate(counts):
            self._counts[r] = c
        f.mode = _lib.MOE_MODES[mode]
        f.counts = self._counts
        if routing is not None:
            f.field_mask |= _lib.MOE_FWD_ROUTING
            f.routing = _lib.MOE_ROUTINGS[routing]
        f.field_mask |= _lib.MOE_FWD_X | _lib.MOE_FWD_TOPK_IDS | _lib.MOE_FWD_TOPK_WEIGHTS
        f.x = hidden.data_ptr()
        f.topk_ids = ids.data_ptr()
        f.topk_weights = w.data_ptr()
        res = ctypes.c_void_p()
        st = lib.incmoe_moe_forward_ex(self._layer, ctypes.byref(f), ctypes.byref(res))
        _errors.check("incmoe_moe_forward_ex", st, self.comm._ptr)
        self._last_counts = list(counts)
        if out is None:
            out = torch.empty(T, self.hidden_size, dtype=self.dtype)
        if T:
            ctypes.memmove(out.data_ptr(), res.value, out.numel() * out.element_size())
        return out

    def _refuse(self, f, problem, counts, mode, routing):
        """Takes part in the forward the others run, refused with problem's text."""
        try:
            given = [int(c) for c in counts]
        except (TypeError, ValueError):
            given = []
        for r in range(self.comm.nranks):
            self._counts[r] = given[r] if len(given) == self.comm.nranks else -1
        f.field_mask |= _lib.MOE_FWD_REFUSED
        f.refused = str(problem).encode()[: _lib.REFUSAL_MAX - 1]
        f.mode = _lib.MOE_MODES.get(mode, _lib.MOE_MODES[self.mode])
        f.counts = self._counts
        if routing in _lib.MOE_ROUTINGS:
            f.field_mask |= _lib.MOE_FWD_ROUTING
            f.routing = _lib.MOE_ROUTINGS[routing]
        lib = _lib.moe_lib()
        lib.incmoe_moe_forward_ex(self._layer, ctypes.byref(f), ctypes.byref(ctypes.c_void_p()))

    # -------------------------------------------------------------- inspect

    def config_for(self, counts):
        """The configuration a pipelined forward with these token counts uses."""
        if self._layer is None:
            raise _errors.IncmoeError("incmoe_moe_config_for", _lib.ERR_CLOSED, "layer closed")
        if len(counts) != self.comm.nranks:
            raise ValueError("counts has %d entries, expected %d" % (len(counts), self.comm.nranks))
        lib = _lib.moe_lib()
        c = (ctypes.c_int * len(counts))(*counts)
        cfg = _lib.moe_config_t()
        _errors.check("incmoe_moe_config_for", lib.incmoe_moe_config_for(self._layer, c, ctypes.byref(cfg)))
        buf = ctypes.create_string_buffer(160)
        lib.incmoe_moe_config_str(ctypes.byref(cfg), buf, len(buf))
        return MoEConfig(cfg.nbands, cfg.gather_workers, cfg.compute_workers, cfg.reduce_workers,
                         cfg.tail_bands, buf.value.decode())

    @property
    def config(self):
        """The pipelined configuration of the last forward's token counts (before
        the first forward: of max_tokens on every rank)."""
        counts = self._last_counts or [self.max_tokens] * self.comm.nranks
        return self.config_for(counts)

    def last_timing(self):
        """This rank's last forward, in milliseconds (libincmoe_moe's breakdown),
        and the path it ran: "routing" ("full" or "masked"), "mode" ("baseline",
        "pipelined" or "decode": the decode step), "algo" ("inc", "ring", "a2a", or "comm": the
        communicator's, when the layer was not told which), "measured" (how
        many paths the forward ran to choose; 0: it ran the chosen one) and
        "measure_runs" (the forwards they took: each path once, those within
        1.5x of the fastest up to three times) and "nbands" (the bands its path
        ran: masked routing's follow the forward's pairs, so they may differ
        from config's)."""
        t = _lib.moe_timing_t()
        _errors.check("incmoe_moe_last_timing_ex", _lib.moe_lib().incmoe_moe_last_timing_ex(
            self._layer, ctypes.byref(t), ctypes.sizeof(t)))
        names = {
            "routing": {v: k for k, v in _lib.MOE_ROUTINGS.items()},
            "mode": {v: k for k, v in _lib.MOE_MODES.items()},
            "algo": {**{v: k for k, v in _lib.ALGOS.items()}, -1: "comm"},
        }
        return {name: names[name].get(getattr(t, name), "unknown") if name in names
                else getattr(t, name) for name, _ in t._fields_}

    @property
    def path(self):
        """(algo, mode, routing) the last forward ran, as last_timing() names them."""
        t = self.last_timing()
        return t["algo"], t["mode"], t["routing"]

    @property
    def _layer(self):
        """The incmoe_moe_t, None once closed (by close() or by the communicator's)."""
        owned = self.__dict__.get("_owned")
        return None if owned is None else owned.ptr

    @property
    def closed(self):
        return self._layer is None

    def close(self):
        """Free the layer (not collective).  Closing the communicator closes it too."""
        owned, self._owned = self.__dict__.get("_owned"), None
        if owned is not None:
            _errors.check("incmoe_moe_destroy", self.comm._release(owned))

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def extra_repr(self):
        return ("E=%d, top_k=%d, H=%d, I=%d, dtype=%s, mode=%s, routing=%s, algo=%s, "
                "max_tokens=%d, rank %d/%d" % (
                    self.num_experts, self.top_k, self.hidden_size, self.intermediate_size,
                    self.dtype, self.mode, self.routing or "setting", self.algo or "comm",
                    self.max_tokens,
                    self.comm.rank, self.comm.nranks))
