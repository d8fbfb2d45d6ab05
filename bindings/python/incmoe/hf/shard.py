"""expert_parallel: a loaded transformers MoE model, its experts sharded over
the ranks of an incmoe Communicator.

Sharding is collective.  Before any call whose shapes depend on the model,
the ranks swap one row of two integers: whether this rank refused (a family
incmoe.hf does not know, E not divisible by N without a placement, a model
sharded already, a setting it does not know) and a hash of what every rank
must agree on (family, sparse blocks, E, k, H, I, dtype, N, mode, routing,
max_tokens, algorithm, placement, keep_weights).
A refusal or a difference is then an error on every rank, and none of them
has changed its model or waits for the others.
"""

import functools
import hashlib
import json
import weakref

from ..communicator import Communicator
from .families import find_blocks
from .peers import CommPeers
from .sharding import Sharding, placements_of
from .step import ShardedExperts, Step

MODES = ("pipelined", "baseline", "auto", "decode")
ROUTINGS = ("full", "masked", "auto")


def _routing_kwargs(routing):
    if routing not in ROUTINGS:
        raise ValueError("routing is %r: expected one of %s" % (routing, ", ".join(ROUTINGS)))
    return {"routing": routing}


def _communicator(comm):
    if isinstance(comm, Communicator):
        return comm
    import torch.distributed as dist

    if comm is None or isinstance(comm, dist.ProcessGroup):
        from ..distributed import communicator

        return communicator(comm)
    raise ValueError(
        "expert_parallel: comm is a %s: expected an incmoe.Communicator or a torch.distributed "
        "group of the \"incmoe\" backend" % type(comm).__name__
    )


def _hash(summary):
    text = json.dumps(summary, sort_keys=True, default=str).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") >> 2


def _agree(peers, summary, problem):
    """One AllGather of [refused, hash]; raises the same kind of error on every rank."""
    import torch

    h = _hash(summary) if summary is not None else 0
    rows = peers.all_gather(torch.tensor([1 if problem is not None else 0, h], dtype=torch.int64))
    if problem is not None:
        raise problem
    refused = [r for r in range(peers.nranks) if rows[r, 0]]
    if refused:
        raise ValueError(
            "incmoe.hf: rank(s) %s refused to shard the model (their errors say why); this "
            "rank's model is unchanged" % ", ".join(map(str, refused))
        )
    groups = {}
    for r in range(peers.nranks):
        groups.setdefault(int(rows[r, 1]), []).append(r)
    if len(groups) > 1:
        raise ValueError(
            "incmoe.hf: the ranks' models or settings differ (ranks grouped by what they "
            "passed: %s); this rank (%d) has %s; every model is unchanged"
            % (" | ".join(",".join(map(str, g)) for g in groups.values()), peers.rank,
               json.dumps(summary, sort_keys=True, default=str))
        )


def even_split(blocks, peers):
    """[lo, hi): the experts rank peers.rank hosts without a placement (E/N each)."""
    if blocks.num_experts % peers.nranks:
        raise ValueError(
            "incmoe.hf: %d experts cannot be split evenly over %d ranks"
            % (blocks.num_experts, peers.nranks)
        )
    el = blocks.num_experts // peers.nranks
    return peers.rank * el, (peers.rank + 1) * el


def shard(model, peers, settings, check, make):
    """The sharding every backend shares.  settings: what besides the model
    the ranks must agree on; check(blocks): the backend's own local checks,
    returning what make needs; make(step, index, blocks, block, checked): the
    ShardedExperts module for one block.  Returns what check returned and
    the experts modules the blocks had (the caller keeps them or not)."""
    problem = summary = None
    try:
        blocks = find_blocks(model, lambda e: isinstance(e, ShardedExperts))
        checked = check(blocks)
        summary = dict(blocks.summary(), nranks=peers.nranks, **settings)
    except Exception as e:  # any refusal still reaches the agreement: nobody waits
        problem = e
    _agree(peers, summary, problem)
    originals = [block.experts for block in blocks.blocks]
    install(model, peers, blocks, lambda step, i, block: make(step, i, blocks, block, checked))
    return checked, originals


def install(model, peers, blocks, make):
    """Makes every block's sharded experts (make(step, index, block)), then
    puts them in the model with a new Step; on a failure nothing changes."""
    step = Step(peers)
    made = []
    try:
        for i, block in enumerate(blocks.blocks):
            made.append(make(step, i, block))
    except BaseException:
        for ex in made:
            close_layer(ex)
        raise
    # Only now the model changes: the experts it had go, and with them (once
    # nothing else holds them) the weights they held.
    for block, ex in zip(blocks.blocks, made):
        block.experts = ex
    step.experts = made
    model._incmoe_step = step
    if not hasattr(model, "_incmoe_generate"):
        _finish_after_generate(model)
    return step


def close_layer(ex):
    close = getattr(getattr(ex, "layer", None), "close", None)
    if close is not None:
        close()


def _finish_after_generate(model):
    """model.generate() then finish(): the class's generate, so that the
    instance does not hold itself (a cycle would outlive `del model`).  The
    step is looked up at each call: recover() and rebalance() replace it."""
    generate = getattr(type(model), "generate", None)
    if generate is None:
        return
    model_ref = weakref.ref(model)

    @functools.wraps(generate)
    def generate_then_finish(*args, **kwargs):
        step = model_ref()._incmoe_step
        try:
            out = generate(model_ref(), *args, **kwargs)
        except BaseException:
            # Still answer the others' forwards if this rank can; its own
            # error is what the caller sees.
            try:
                step.finish()
            except Exception:
                pass
            raise
        step.finish()
        return out

    model.generate = generate_then_finish
    model._incmoe_generate = True


def expert_parallel(model, comm=None, routing="auto", mode="auto", max_tokens=2048,
                    timeout_ms=None, algo="auto", placement=None, keep_weights=False):
    """Shard a transformers MoE model's experts over comm's ranks, in place.

    model: a loaded OLMoE, Mixtral, Qwen2-MoE or Qwen3-MoE model (transformers
    5.x, on the CPU, every rank the same config and weights).  comm: an
    incmoe.Communicator, or a torch.distributed process group of the
    "incmoe" backend (None: the default group).  Rank r keeps experts
    [r*E/N, (r+1)*E/N) of every sparse block (or placement's), in an incmoe.MoE layer
    (max_tokens per rank per layer call; longer forwards run as several
    calls); the others are freed.

    The path each layer runs: by default (mode, algo and routing "auto")
    the layers' own choice, as incmoe.MoE makes it: the first block's first
    call runs every path (in-network, ring and a2a; baseline and pipelined;
    full and masked routing) on its own inputs, the close ones three times,
    and keeps the fastest; the layers of one shape on one communicator share
    their choices, so the later blocks run that path without measuring and
    the whole model runs one.  It is measured again for token counts past 2x
    of every choice kept (a prefill and the decode steps each keep theirs).
    Where every rank's tokens are within the layers' decode capacity
    (min(max_tokens, 32)), the decode step on each algorithm is measured too
    (incmoe.MoE, "The decode step": one low-latency dispatch and combine, no
    count exchange), and a kept decode choice runs with no exchange at all.
    So a model's first forward, and its first decode step, cost up to 45 of
    one layer's forwards; every one after runs the fastest path there is.  Or
    force it: mode "pipelined" or "baseline", or "decode" (the decode step for
    every forward within the decode capacity, pipelined above it); algo "inc", "ring", "a2a" or
    None (comm's own algorithm, and nothing else opened on the switch);
    routing "full" (every token to every rank), "masked" (each token only
    to the ranks of its experts: incmoe.MoE's routing-aware dispatch and
    combine; an algorithm without them fails the forwards on every rank) or
    "auto" (with algo None: masked where it moves fewer bytes; see
    incmoe.MoE).  Attention stays data-parallel: each rank runs its own
    prompts.

    Collective: every rank calls it with the same arguments, and every
    forward after it.  model.generate() then finishes (see incmoe.hf.finish)
    before it returns; a rank that runs its own forwards calls
    incmoe.hf.finish(model) after its last.  Returns the model.

    placement: None (the even split above), or replicas as incmoe.MoE takes
    them: a list of E lists, placement[e] the ranks holding expert e
    (ascending, distinct, at least one), for every sparse block, or a list
    of such lists, one per block; E need not divide by N.  Each rank's layer
    then holds the weights of every expert it holds.  keep_weights: keep
    every expert's weights (the model's own experts modules, as loaded) on
    every rank, which incmoe.hf.rebalance and incmoe.hf.recover need to
    build the layers again; without it they are freed.
    """
    comm = _communicator(comm)
    settings = {"routing": routing, "mode": mode, "max_tokens": max_tokens, "algo": comm.algo,
                "path_algo": algo, "placement": placement, "keep_weights": bool(keep_weights)}
    layer_kw = dict(mode=mode, max_tokens=max_tokens, timeout_ms=timeout_ms, algo=algo)

    def check(blocks):
        if mode not in MODES:
            raise ValueError("mode is %r: expected one of %s" % (mode, ", ".join(MODES)))
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError("max_tokens is %r: expected a positive integer" % (max_tokens,))
        layer_kw.update(_routing_kwargs(routing))
        placements = placements_of(placement, blocks, comm.nranks)
        if placements is None:
            even_split(blocks, CommPeers(comm))
        return Sharding(comm, blocks, layer_kw, placements, None)

    def make(step, index, blocks, block, sharding):
        return sharding.make(step, index, block.experts)

    sharding, originals = shard(model, CommPeers(comm), settings, check, make)
    if keep_weights:
        sharding.weights = originals
    model._incmoe_sharding = sharding
    return model


def finish(model):
    """This rank has no forward left: take part in the other ranks' forwards
    with empty ones until no rank has one left (collective).  generate() of a
    sharded model calls it itself."""
    step = getattr(model, "_incmoe_step", None)
    if step is None:
        raise ValueError("incmoe.hf.finish: the model was not sharded by incmoe.hf")
    step.finish()
