"""Every rank calls every sparse block the same number of times.

An expert-parallel MoE forward is collective: rank r's tokens are computed by
the experts of every rank.  So a rank whose sequences stopped early (EOS), or
that has no prompts, must still take part in the others' forwards.  Step does
that for one model:

- The first sparse block of each model forward gathers [tokens, active] from
  every rank (one small AllGather per forward, not per block); the later
  blocks of that forward pass those counts to their layer instead of
  gathering again.
- finish() is what a rank calls when it has no forward left: it answers the
  others' forwards with empty ones (0 tokens, a legal count), block by block
  in the same order, until a gather shows that no rank is active.  The
  generate() of a model incmoe.hf sharded calls it before returning, so
  ranks whose sequences end at different steps all return.
- A forward that stopped between two blocks on this rank (an exception in
  attention, say) is completed, on the next forward or in finish(), with
  zeros in place of its tokens: the others wait in the block this rank did
  not reach, and a token's output goes back only to its own rank, so the
  zeros change nothing the others compute.
- A failure inside a sparse block (a collective that failed, arguments a
  layer refused, which fail that forward on every rank) ends the model's
  expert parallelism: later calls raise at once.
"""

import time
import weakref

import torch


class Step:
    def __init__(self, peers):
        self.peers = peers
        self.experts = []  # the sharded experts modules, in the order the model calls them
        self.next = 0  # the block this rank calls next
        self.counts = None  # every rank's tokens in the current forward
        self.failed = None
        # Seconds spent in the sharded experts, and in their collectives
        # (the AgRs baseline's calls; an incmoe layer's in baseline mode), since
        # the caller last zeroed them.  collectives_overlapped: some call since
        # then ran pipelined, whose collectives overlap its experts and are not
        # in collective_seconds.
        self.moe_seconds = 0.0
        self.collective_seconds = 0.0
        self.collectives_overlapped = False

    def _gather(self, tokens, active):
        rows = self.peers.all_gather(torch.tensor([tokens, 1 if active else 0], dtype=torch.int64))
        return rows[:, 0].tolist(), rows[:, 1].tolist()

    def _check(self):
        if self.failed is not None:
            raise RuntimeError(
                "incmoe.hf: an earlier MoE forward of this model failed (%s); its expert "
                "parallelism cannot go on" % self.failed
            )

    def begin(self, index, tokens):
        """The counts block `index` runs with; gathers them at block 0."""
        self._check()
        if index == 0:
            if self.next != 0:
                self._complete()
            counts, _ = self._gather(tokens, True)
            self.counts = counts
        elif index != self.next:
            raise RuntimeError(
                "incmoe.hf: sparse block %d called while block %d was due: the blocks of a "
                "sharded model run only inside its forward, in order" % (index, self.next)
            )
        if self.counts[self.peers.rank] != tokens:
            raise RuntimeError(
                "incmoe.hf: sparse block %d got %d tokens, but this forward started with %d"
                % (index, tokens, self.counts[self.peers.rank])
            )
        return self.counts

    def end(self, index):
        self.next = (index + 1) % len(self.experts)

    def fail(self, error):
        self.failed = "%s: %s" % (type(error).__name__, error)

    def _complete(self):
        """Run this rank's part of the blocks its last forward did not reach, on zeros."""
        T = self.counts[self.peers.rank]
        for ex in self.experts[self.next :]:
            ex.run(*ex.idle_inputs(T), self.counts)

    def finish(self):
        """Serve the other ranks' forwards with empty ones until no rank is active."""
        self._check()
        if self.next != 0:
            self._complete()
        while True:
            counts, active = self._gather(0, False)
            if not any(active):
                return
            self.counts = counts
            for ex in self.experts:
                ex.run(*ex.idle_inputs(0), counts)


class ShardedExperts(torch.nn.Module):
    """What replaces a sparse block's experts: forward(hidden, top_k_index,
    top_k_weights) -> [T, H] as transformers' fused experts, computed by a
    subclass's _run(hidden, ids, weights, counts) over every rank's experts."""

    def __init__(self, step, index, hidden_size, top_k, dtype):
        super().__init__()
        # Weak: the model holds the step, the step its experts; a strong link
        # back would make a cycle that keeps the layers (and their hold on the
        # communicator) alive after the model is dropped, until a gc pass.
        self._step_ref, self._index = weakref.ref(step), index
        self.hidden_size, self.top_k, self.dtype = hidden_size, top_k, dtype

    @property
    def _step(self):
        step = self._step_ref()
        if step is None:
            raise RuntimeError("incmoe.hf: these experts outlived the model they were sharded for")
        return step

    def idle_inputs(self, tokens):
        """Inputs that take part in a forward without adding anything: zero weights."""
        ids = torch.arange(self.top_k, dtype=torch.int64).expand(tokens, -1)
        return (torch.zeros(tokens, self.hidden_size, dtype=self.dtype), ids,
                torch.zeros(tokens, self.top_k, dtype=torch.float32))

    def forward(self, hidden_states, top_k_index, top_k_weights):
        x = hidden_states.reshape(-1, self.hidden_size).contiguous()
        counts = self._step.begin(self._index, x.shape[0])
        return self.run(x, top_k_index, top_k_weights, counts)

    def run(self, hidden, ids, weights, counts):
        """This block with the counts agreed for the current forward."""
        step = self._step
        t0 = time.perf_counter()
        try:
            y = self._run(hidden, ids, weights, counts)
        except BaseException as e:
            step.fail(e)
            raise
        step.moe_seconds += time.perf_counter() - t0
        step.end(self._index)
        return y

    def _run(self, hidden, ids, weights, counts):
        raise NotImplementedError
