"""Choosing a placement with replicas (libincmoe_moe's "Choosing a placement").

    choose_placement(load, nranks, extra_slots, num_experts=E)
        -> [[rank, ...] for each expert]
    placement_rows(load, placement, split="per_token")
        -> [rows each rank receives]

load is a routing sample: one entry per rank, each that rank's tokens' expert
ids ([T_r][k]: lists, tuples, a numpy array or a CPU tensor; T_r may differ
and be 0), as the layer's forwards take them.  A placement is a list, per
expert, of the ranks holding it, ascending and distinct, at least one (the
base placement: expert e on rank e // (E // N) alone; a chosen one may move
experts off it).  Both calls are pure (no communicator):
every rank given the same sample gets the same answer.  Bad input raises
IncmoeError with the library's reason (ERR_INVALID_ARG), or ValueError where
the shape is wrong before the library sees it.
"""

import ctypes

from . import _errors, _lib

_WHY = 256


def _rows_of(x):
    """x as a list of lists of ints (numpy and torch through tolist)."""
    if hasattr(x, "tolist"):
        x = x.tolist()
    return [[int(i) for i in row] for row in x]


def _int32s(values, what):
    """values as a ctypes int32 array; one outside int32 would wrap silently, so it raises."""
    for v in values:
        if not -(2**31) <= v < 2**31:
            raise ValueError("%s: %d does not fit a C int" % (what, v))
    return (ctypes.c_int32 * max(len(values), 1))(*values)


def _sample(load, num_experts):
    """The ctypes sample of load, and the arrays it points into (kept alive by the caller)."""
    per_rank = [_rows_of(r) for r in load]
    nranks = len(per_rank)
    ks = {len(row) for rows in per_rank for row in rows}
    if len(ks) > 1:
        raise ValueError("load: every token needs the same number of experts, got %s" % sorted(ks))
    k = ks.pop() if ks else 1
    counts = (ctypes.c_int * max(nranks, 1))(*[len(rows) for rows in per_rank])
    flat = [i for rows in per_rank for row in rows for i in row]
    ids = _int32s(flat, "load: an expert id")
    s = _lib.moe_routing_sample_t(num_experts, k, nranks, counts, ids)
    return s, (counts, ids)


def _failed(call, st, why):
    raise _errors.IncmoeError(call, st, why.value.decode(errors="replace"))


def choose_placement(load, nranks, extra_slots, num_experts):
    """A placement of every expert on at least one rank, at most num_experts // nranks +
    extra_slots experts a rank (experts may move off their base ranks), chosen for load's
    routing to lower the busiest rank's received rows under the layer's per-token rule
    (incmoe_moe_placement_choose: a balanced packing, then a local search replaying load).
    The same load gives the same placement.  load has nranks entries."""
    if len(load) != nranks:
        raise ValueError("load has %d ranks' samples, nranks is %d" % (len(load), nranks))
    s, keep = _sample(load, num_experts)
    offsets = (ctypes.c_int * (max(num_experts, 0) + 1))()
    ranks = (ctypes.c_int * max(num_experts + max(nranks, 0) * max(extra_slots, 0), 1))()
    why = ctypes.create_string_buffer(_WHY)
    st = _lib.moe_lib().incmoe_moe_placement_choose(
        ctypes.byref(s), extra_slots, offsets, ranks, why, _WHY
    )
    if st != _lib.OK:
        _failed("incmoe_moe_placement_choose", st, why)
    return [list(ranks[offsets[e] : offsets[e + 1]]) for e in range(num_experts)]


def placement_rows(load, placement, split="per_token"):
    """The rows each rank receives when load runs on placement: split "per_token" (the
    layer's rule) or "static" (each expert's tokens split evenly by token index), as
    incmoe_moe_placement_rows counts them.  The busiest rank's rows are max() of it."""
    if split not in _lib.MOE_SPLITS:
        raise ValueError("split %r: want one of %s" % (split, sorted(_lib.MOE_SPLITS)))
    s, keep = _sample(load, len(placement))
    flat = [int(r) for ranks in placement for r in ranks]
    offsets = [0]
    for ranks in placement:
        offsets.append(offsets[-1] + len(ranks))
    p = _lib.moe_placement_t(
        ctypes.cast(_int32s(offsets, "placement size"), ctypes.POINTER(ctypes.c_int)),
        ctypes.cast(_int32s(flat, "placement: a rank"), ctypes.POINTER(ctypes.c_int)),
    )
    rows = (ctypes.c_int64 * max(len(load), 1))()
    why = ctypes.create_string_buffer(_WHY)
    st = _lib.moe_lib().incmoe_moe_placement_rows(
        ctypes.byref(s), ctypes.byref(p), _lib.MOE_SPLITS[split], rows, why, _WHY
    )
    if st != _lib.OK:
        _failed("incmoe_moe_placement_rows", st, why)
    return list(rows[: len(load)])
