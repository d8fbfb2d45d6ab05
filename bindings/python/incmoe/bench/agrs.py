"""The baseline: vLLM's default expert-parallel path with data-parallel
attention (AgRsAll2AllManager, --all2all-backend allgather_reducescatter),
written with torch.distributed calls as vLLM writes them, over any group
(gloo on CPUs).

Per sparse block: dispatch all-gathers every rank's hidden states, top-k
weights (float32) and top-k ids (int32) (vLLM's all_gatherv; here padded to
the largest rank's count, which the ranks know from the count exchange vLLM
makes once per forward for its DP metadata); every rank runs its local
experts on every gathered token routed to them and applies the weights; the
combine reduce-scatters the [N x T, H] partial outputs back to their ranks.
The time inside the dispatch and combine calls is added to the model's
Step.collective_seconds: the share of a forward that in-network collectives
can shorten.
"""

import time

import torch
import torch.nn.functional as F

from ..hf.peers import GroupPeers
from ..hf.shard import even_split, shard
from ..hf.step import ShardedExperts


def _padded(t, rows):
    if t.shape[0] == rows:
        return t.contiguous()
    out = t.new_zeros((rows,) + tuple(t.shape[1:]))
    out[: t.shape[0]] = t
    return out


class AgRsExperts(ShardedExperts):
    def __init__(self, step, index, experts, lo, hi, top_k, group):
        w13 = experts.gate_up_proj.detach()
        super().__init__(step, index, w13.shape[2], top_k, w13.dtype)
        self.w13 = w13[lo:hi].clone()
        self.w2 = experts.down_proj.detach()[lo:hi].clone()
        self.lo, self.group = lo, group

    def _experts(self, x, ids, w):
        """Local experts on every token routed to them, weighted, summed per token."""
        y = torch.zeros_like(x)
        I = self.w2.shape[2]
        for j in range(self.w13.shape[0]):
            tok, slot = (ids == self.lo + j).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            gu = F.linear(x[tok], self.w13[j])
            h = F.linear(F.silu(gu[:, :I]) * gu[:, I:], self.w2[j])
            y.index_add_(0, tok, h * w[tok, slot, None].to(h.dtype))
        return y

    def _run(self, hidden, ids, weights, counts):
        import torch.distributed as dist

        n, rows, T = len(counts), max(counts), hidden.shape[0]
        if rows == 0:
            return hidden
        H, k = self.hidden_size, self.top_k
        t0 = time.perf_counter()
        gx = hidden.new_empty(n * rows, H)
        gw = torch.empty(n * rows, k, dtype=torch.float32)
        gi = torch.empty(n * rows, k, dtype=torch.int32)
        dist.all_gather_into_tensor(gx, _padded(hidden, rows), group=self.group)
        dist.all_gather_into_tensor(gw, _padded(weights.to(torch.float32), rows), group=self.group)
        # Padding rows route to no expert.
        pad_ids = _padded(ids.to(torch.int32), rows)
        pad_ids[T:] = -1
        dist.all_gather_into_tensor(gi, pad_ids, group=self.group)
        t1 = time.perf_counter()
        y = self._experts(gx, gi, gw)
        t2 = time.perf_counter()
        out = hidden.new_empty(rows, H)
        dist.reduce_scatter_tensor(out, y, group=self.group)
        self._step.collective_seconds += (t1 - t0) + (time.perf_counter() - t2)
        return out[:T]


def agrs_parallel(model, group=None):
    """Shard model's experts over a torch.distributed group on the AgRs path
    (the counterpart of incmoe.hf.expert_parallel; the same checks and the
    same per-forward agreement, over the group)."""
    peers = GroupPeers(group)

    def make(step, index, blocks, block, split):
        return AgRsExperts(step, index, block.experts, *split, blocks.top_k, group)

    shard(model, peers, {"path": "agrs"}, lambda blocks: even_split(blocks, peers), make)
    return model
