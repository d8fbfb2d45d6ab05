"""How a model's sparse blocks are sharded on incmoe: what expert_parallel
was given (the communicator, the layers' settings, each block's placement)
and, with keep_weights, every expert's weights, so that rebalance() and
recover() can build the layers again with another placement or on another
communicator."""

import torch

from ..moe import MoE, _check_placement
from .experts import IncmoeExperts


def placements_of(placement, blocks, nranks):
    """placement as one list of E rank lists per sparse block (None: the even split).
    Given once it serves every block; a list of such lists is one per block."""
    if placement is None:
        return None
    nb, E = len(blocks.blocks), blocks.num_experts
    if not isinstance(placement, (list, tuple)) or not placement:
        raise ValueError("placement is %r: expected a list of E = %d rank lists, or one such "
                         "list per sparse block" % (placement, E))
    first = placement[0]
    per_block = isinstance(first, (list, tuple)) and len(first) > 0 and isinstance(
        first[0], (list, tuple))
    ps = list(placement) if per_block else [placement] * nb
    if len(ps) != nb:
        raise ValueError("placement has %d blocks' placements: the model has %d sparse blocks"
                         % (len(ps), nb))
    out = []
    for b, p in enumerate(ps):
        if not isinstance(p, (list, tuple)) or len(p) != E or not all(
                isinstance(rs, (list, tuple)) for rs in p):
            raise ValueError("placement of sparse block %d (%s): expected a list of E = %d rank "
                             "lists" % (b, blocks.names[b], E))
        p = [[int(r) for r in rs] for rs in p]
        try:  # ranks in range here, before the agreement; their order the layer's create checks
            _check_placement(p, E, nranks)
        except ValueError as e:
            raise ValueError("incmoe.hf: sparse block %d (%s): %s"
                             % (b, blocks.names[b], e)) from None
        out.append(p)
    return out


class Sharding:
    """One model's incmoe sharding.  layer_kw: incmoe.MoE's settings (mode,
    max_tokens, timeout_ms, algo, routing); weights: each block's full experts
    module (keep_weights), else None."""

    def __init__(self, comm, blocks, layer_kw, placements, weights):
        self.comm, self.blocks, self.layer_kw = comm, blocks, layer_kw
        self.placements, self.weights = placements, weights

    def placement(self, index):
        return None if self.placements is None else self.placements[index]

    def experts_of(self, index):
        """The expert ids this rank hosts in block index, ascending."""
        p = self.placement(index)
        if p is None:
            el = self.blocks.num_experts // self.comm.nranks
            return list(range(self.comm.rank * el, (self.comm.rank + 1) * el))
        return [e for e, rs in enumerate(p) if self.comm.rank in rs]

    def make(self, step, index, experts):
        """The IncmoeExperts of block index, its weights taken from experts (a
        transformers fused experts module holding all E)."""
        ids = torch.tensor(self.experts_of(index), dtype=torch.int64)
        w13 = experts.gate_up_proj.detach().index_select(0, ids)
        w2 = experts.down_proj.detach().index_select(0, ids)
        b = self.blocks
        layer = MoE(self.comm, b.num_experts, b.top_k, b.hidden_size, b.intermediate_size, w13,
                    w2, placement=self.placement(index), **self.layer_kw)
        return IncmoeExperts(step, index, layer)
