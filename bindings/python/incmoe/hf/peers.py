"""The ranks of an expert-parallel model and how they swap a few integers.

The agreement on a model's configuration and the per-forward agreement on
token counts are tiny AllGathers of int64 rows.  Over incmoe they go through
the model's own Communicator (in-network); the benchmark's AgRs baseline,
which runs on torch.distributed, uses a group of any backend.
"""

import torch


class CommPeers:
    """The ranks of an incmoe.Communicator."""

    def __init__(self, comm):
        self.comm = comm
        self.rank, self.nranks = comm.rank, comm.nranks
        self._bufs = {}  # m -> (send, recv): registered once, reused every forward

    def all_gather(self, row):
        """row: an int64 tensor [m], the same m on every rank -> [nranks, m]."""
        m = row.numel()
        if m not in self._bufs:
            self._bufs[m] = (torch.empty(m, dtype=torch.int64),
                             torch.empty(self.nranks * m, dtype=torch.int64))
        send, recv = self._bufs[m]
        send.copy_(row.reshape(-1))
        self.comm.all_gather(recv, send)
        return recv.view(self.nranks, m).clone()


class GroupPeers:
    """The ranks of a torch.distributed process group (None: the default group)."""

    def __init__(self, group=None):
        import torch.distributed as dist

        self._dist, self.group = dist, group
        self.rank, self.nranks = dist.get_rank(group), dist.get_world_size(group)

    def all_gather(self, row):
        out = torch.empty(self.nranks * row.numel(), dtype=torch.int64)
        self._dist.all_gather_into_tensor(out, row.contiguous(), group=self.group)
        return out.view(self.nranks, -1)
