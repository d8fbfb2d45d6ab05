"""A sparse block's experts on incmoe.MoE: this rank's E/N of them, every
rank's tokens through in-network dispatch and combine."""

from .step import ShardedExperts


class IncmoeExperts(ShardedExperts):
    """Replaces transformers' fused experts with an incmoe.MoE layer.

    The router's top-k weights are used as it gives them (incmoe.MoE never
    renormalises), so each family's own routing holds.  A forward with more
    tokens than the layer's max_tokens on some rank runs as several layer
    calls of at most max_tokens per rank, the same number on every rank
    (the counts are agreed before).
    """

    def __init__(self, step, index, layer):
        super().__init__(step, index, layer.hidden_size, layer.top_k, layer.dtype)
        self.layer = layer

    def _run(self, hidden, ids, weights, counts):
        layer, mt = self.layer, self.layer.max_tokens
        if max(counts) <= mt:
            return layer(hidden, ids, weights, counts=counts)
        out = hidden.new_empty(hidden.shape)
        me = layer.comm.rank
        for lo in range(0, max(counts), mt):
            part = [min(max(c - lo, 0), mt) for c in counts]
            sl = slice(lo, lo + part[me])
            layer(hidden[sl], ids[sl], weights[sl], counts=part, out=out[sl])
        return out

    def extra_repr(self):
        return self.layer.extra_repr()
