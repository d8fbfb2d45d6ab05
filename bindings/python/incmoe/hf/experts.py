"""A sparse block's experts on incmoe.MoE: this rank's E/N of them, every
rank's tokens through in-network dispatch and combine."""

import torch

from .step import ShardedExperts

# The parts of a baseline-mode (or decode) forward that are collectives (milliseconds in
# incmoe.MoE.last_timing()); a pipelined forward overlaps them with the experts.
_COLLECTIVE_MS = ("exchange_ms", "allgather_ms", "reducescatter_ms", "dispatch_ms", "combine_ms")

# The routing sample each block keeps for incmoe.hf.rebalance: its last tokens' expert ids.
SAMPLE_TOKENS = 4096


class IncmoeExperts(ShardedExperts):
    """Replaces transformers' fused experts with an incmoe.MoE layer.

    The router's top-k weights are used as it gives them (incmoe.MoE never
    renormalises), so each family's own routing holds.  A forward with more
    tokens than the layer's max_tokens on some rank runs as several layer
    calls of at most max_tokens per rank, the same number on every rank
    (the counts are agreed before).

    A decode step (every rank's count within the layer's decode capacity)
    writes into one output buffer this block keeps, so it allocates nothing
    per step: the model consumes a block's output (the residual add) before
    its next step calls the block again.
    """

    def __init__(self, step, index, layer):
        super().__init__(step, index, layer.hidden_size, layer.top_k, layer.dtype)
        self.layer = layer
        self._decode_out = torch.empty(layer.decode_tokens, layer.hidden_size, dtype=layer.dtype)
        self._recent, self._recent_rows = [], 0  # this rank's last forwards' top-k ids

    def forward(self, hidden_states, top_k_index, top_k_weights):
        self._remember(top_k_index)
        return super().forward(hidden_states, top_k_index, top_k_weights)

    def _remember(self, ids):
        ids = ids.detach().reshape(-1, self.top_k).to(torch.int64, copy=True)  # not the router's
        self._recent.append(ids)
        self._recent_rows += ids.shape[0]
        while self._recent_rows - self._recent[0].shape[0] >= SAMPLE_TOKENS:
            self._recent_rows -= self._recent.pop(0).shape[0]

    def routing_sample(self):
        """[T, k]: the expert ids of this rank's last (up to SAMPLE_TOKENS) tokens in this block."""
        if not self._recent:
            return torch.empty(0, self.top_k, dtype=torch.int64)
        return torch.cat(self._recent)[-SAMPLE_TOKENS:]

    def _run(self, hidden, ids, weights, counts):
        layer, mt = self.layer, self.layer.max_tokens
        if max(counts) <= layer.decode_tokens:
            out = layer(hidden, ids, weights, counts=counts, out=self._decode_out[: hidden.shape[0]])
            self._note_collectives()
            return out
        if max(counts) <= mt:
            out = layer(hidden, ids, weights, counts=counts)
            self._note_collectives()
            return out
        out = hidden.new_empty(hidden.shape)
        me = layer.comm.rank
        for lo in range(0, max(counts), mt):
            part = [min(max(c - lo, 0), mt) for c in counts]
            sl = slice(lo, lo + part[me])
            layer(hidden[sl], ids[sl], weights[sl], counts=part, out=out[sl])
            self._note_collectives()
        return out

    def _note_collectives(self):
        """Adds the last layer call's collective time to the step's (baseline
        mode and the decode step); a pipelined call marks the step's collectives as overlapped."""
        t = self.layer.last_timing()
        step = self._step
        if t["mode"] in ("baseline", "decode"):  # their collectives are timed, not overlapped
            step.collective_seconds += sum(t[k] for k in _COLLECTIVE_MS) / 1e3
        else:
            step.collectives_overlapped = True

    def extra_repr(self):
        return self.layer.extra_repr()
