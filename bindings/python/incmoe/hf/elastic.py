"""Building a sharded model's layers again: rebalance() with a placement
chosen from the routing the layers saw, recover() on the survivors of a
lost rank.

Both need every expert's weights (expert_parallel(..., keep_weights=True)):
"moving" an expert to a rank is building that rank's layer with it, from
the weights the rank still has.  The old layers are closed only after the
new ones are made, so a failure leaves the model as it was.
"""

import torch

from .. import placement as _placement
from .peers import CommPeers
from .shard import close_layer, install
from .sharding import Sharding


def _sharding(model, what):
    sh = getattr(model, "_incmoe_sharding", None)
    if sh is None:
        raise ValueError("incmoe.hf.%s: the model was not sharded by incmoe.hf.expert_parallel"
                         % what)
    if sh.weights is None:
        raise ValueError("incmoe.hf.%s: the model was sharded without keep_weights=True, so the "
                         "experts' weights it needs were freed" % what)
    return sh


def _rebuild(model, sh, comm, placements):
    """Every block's layer again on comm with placements; then the old ones closed."""
    old = model._incmoe_step.experts
    new = Sharding(comm, sh.blocks, sh.layer_kw, placements, sh.weights)
    install(model, CommPeers(comm), sh.blocks,
            lambda step, i, block: new.make(step, i, sh.weights[i]))
    model._incmoe_sharding = new
    for ex in old:
        close_layer(ex)


def _check_sample(sample, nb, k):
    """sample as one [T, k] int64 tensor per block; ValueError naming what is wrong."""
    if not isinstance(sample, (list, tuple)) or len(sample) != nb:
        raise ValueError("incmoe.hf.rebalance: sample must be a list of %d [T, k] id tensors, "
                         "one per sparse block" % nb)
    out = []
    for i, ids in enumerate(sample):
        ids = torch.as_tensor(ids)
        if ids.dim() != 2 or ids.shape[1] != k or ids.dtype.is_floating_point:
            raise ValueError("incmoe.hf.rebalance: sample[%d] has shape %s and dtype %s: expected "
                             "[T, %d] integer expert ids" % (i, tuple(ids.shape), ids.dtype, k))
        out.append(ids.to(torch.int64))
    return out


def _gather_load(peers, ids, T, k):
    """Every rank's [T_r, k] ids of one block (T: every rank's T_r) as choose_placement's load."""
    m = max(max(T) * k, 1)
    row = torch.full((m,), -1, dtype=torch.int64)
    row[: ids.numel()] = ids.reshape(-1)
    rows = peers.all_gather(row)
    return [rows[r, : T[r] * k].view(T[r], k) for r in range(peers.nranks)]


def rebalance(model, sample=None, extra_slots=1):
    """Choose each sparse block's placement from its load and build the layers
    with it (collective, between batches: every rank calls it after its last
    forward; it runs incmoe.hf.finish first).  sample: None (the expert ids of
    each block's last tokens on this rank, up to SAMPLE_TOKENS, kept by the
    forwards since the layers were built) or one [T, k] id tensor per sparse
    block; every rank's sample makes the load.  extra_slots: experts each
    rank may hold beyond E / N (incmoe.choose_placement).  The outputs are
    the same (within the sums' order); returns the placements, one per block."""
    sh = _sharding(model, "rebalance")
    step = model._incmoe_step
    step.finish()
    b, peers = sh.blocks, step.peers
    problem = None
    try:
        if sample is None:
            sample = [ex.routing_sample() for ex in step.experts]
        sample = _check_sample(sample, len(b.blocks), b.top_k)
        counts = [ids.shape[0] for ids in sample]
    except ValueError as e:
        problem, counts = e, [0] * len(b.blocks)
    rows = peers.all_gather(torch.tensor([1 if problem else 0] + counts, dtype=torch.int64))
    if problem is not None:
        raise problem
    if rows[:, 0].any():
        bad = [r for r in range(peers.nranks) if rows[r, 0]]
        raise ValueError("incmoe.hf.rebalance: rank(s) %s refused their sample (their errors say "
                         "why); the layers are unchanged" % ", ".join(map(str, bad)))
    placements = []
    for i, ids in enumerate(sample):
        load = _gather_load(peers, ids, rows[:, 1 + i].tolist(), b.top_k)
        placements.append(_placement.choose_placement(load, peers.nranks, extra_slots,
                                                      b.num_experts))
    _rebuild(model, sh, sh.comm, placements)
    return placements


def _less(placement, olds, name, lost):
    """placement without the lost ranks, renumbered to the survivors' new ranks."""
    out = []
    for e, rs in enumerate(placement):
        live = [olds.index(r) for r in rs if r in olds]
        if not live:
            raise ValueError(
                "incmoe.hf.recover: expert %d of %s has no live replica (it was held by rank(s) "
                "%s; lost: %s); the model cannot run on the survivors"
                % (e, name, ", ".join(map(str, rs)), ", ".join(map(str, lost))))
        out.append(live)
    return out


def recover(model):
    """After a collective of the model failed for a lost rank (every survivor's
    forward or generate raised): shrink the model's communicator
    (Communicator.shrink) and build every block's layer on the survivors,
    each expert on its live replicas (the placement less the lost ranks,
    renumbered).  Collective over the survivors.  Returns the new
    Communicator (the model's from now on); the old one stays the caller's
    to close.  An expert without a live replica raises ValueError naming it,
    on every survivor, and the model is left failed.  The caller then runs
    its interrupted prompts again."""
    sh = _sharding(model, "recover")
    old = sh.comm
    new = old.shrink()
    try:
        olds = CommPeers(new).all_gather(torch.tensor([old.rank], dtype=torch.int64))[:, 0].tolist()
        lost = [r for r in range(old.nranks) if r not in olds]
        b = sh.blocks
        el = b.num_experts // old.nranks
        placements = []
        for i, name in enumerate(b.names):
            p = sh.placement(i) or [[e // el] for e in range(b.num_experts)]
            placements.append(_less(p, olds, name, lost))
        _rebuild(model, sh, new, placements)
    except BaseException:
        new.close()
        raise
    return new
