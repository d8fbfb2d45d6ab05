"""incmoe.hf with replicas: expert_parallel's placement, rebalance() between batches, and
generation that survives a lost rank (recover()).

Every rank builds the same seeded OLMoE-shaped model (incmoe.hf.models, tiny: E=64, k=8) and
computes the single-process model's logits and greedy tokens on its own prompts before
sharding; the sharded model must give the same (logits within 1e-4 relative, tokens
identical, fp32), with every expert on two ranks, after a rebalance, and on the survivors of a
killed rank after recover().
"""

import os

import pytest
import torch

transformers = pytest.importorskip("transformers")

import incmoe  # noqa: E402
import incmoe.hf  # noqa: E402
from conftest import new_job, run_ranks  # noqa: E402
from incmoe.hf import models  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
models.preload()

FP32_TOL = 1e-4
GEN = dict(max_new_tokens=12, do_sample=False, pad_token_id=0, eos_token_id=None)
LAYER = dict(mode="pipelined", algo=None, timeout_ms=20000)  # one path: no measuring


def _rel(got, ref):
    return ((got.double() - ref.double()).abs().max() / ref.double().abs().max()).item()


def _two_each(E, n):
    """Expert e on its base rank and the next one: every expert on two ranks."""
    el = E // n
    return [sorted({e // el, (e // el + 1) % n}) for e in range(E)]


def _reference(rank, seed=7):
    """A tiny OLMoE model, this rank's prompts, and the single-process model's logits and
    greedy tokens on them."""
    cfg = models.config("olmoe", "tiny")
    x = models.prompts(cfg, 2, 5 + rank, seed=200 + rank)
    model = models.build(cfg, seed=seed)
    with torch.no_grad():
        return model, x, model(x).logits, model.generate(x, **GEN)


def _layers(model):
    return [m.layer for m in model.modules() if isinstance(m, incmoe.hf.experts.IncmoeExperts)]


def replicas_body(rank, n, addr, job):
    model, x, ref, ref_gen = _reference(rank)
    E = model.config.num_experts
    # One placement per block, different ones, on 3 ranks (E = 64 does not divide by 3).
    first = [[e % n] if e % 4 else sorted({e % n, (e + 1) % n}) for e in range(E)]
    second = [sorted({0, (e + 2) % n}) for e in range(E)]
    with incmoe.Communicator(addr, job, rank, n) as comm:
        # Refusals: every rank raises, naming what is wrong, and the model is unchanged.
        with pytest.raises(ValueError, match="3 blocks' placements: the model has 2 sparse"):
            incmoe.hf.expert_parallel(model, comm, placement=[first, second, first], **LAYER)
        with pytest.raises(ValueError, match="placement\\[5\\] is \\[0, 7\\]"):
            incmoe.hf.expert_parallel(model, comm, placement=[first[:5] + [[0, 7]] + first[6:],
                                                              second], **LAYER)
        with pytest.raises(ValueError, match="64 experts cannot be split evenly over 3 ranks"):
            incmoe.hf.expert_parallel(model, comm, **LAYER)
        incmoe.hf.expert_parallel(model, comm, placement=[first, second], **LAYER)
        layers = _layers(model)
        assert [ly.placement for ly in layers] == [first, second]
        with torch.no_grad():
            assert _rel(model(x).logits, ref) <= FP32_TOL
            assert torch.equal(model.generate(x, **GEN), ref_gen)
        del model, layers


def test_placement_with_replicas(switch):
    """expert_parallel(placement=...): one placement per block, replicas, E not divisible by
    N; the single-process model's logits and tokens."""
    run_ranks(replicas_body, 3, switch.address, new_job())


def rebalance_body(rank, n, addr, job):
    model, x, ref, ref_gen = _reference(rank)
    with incmoe.Communicator(addr, job, rank, n) as comm:
        incmoe.hf.expert_parallel(model, comm, keep_weights=True, **LAYER)
        with torch.no_grad():
            assert torch.equal(model.generate(x, **GEN), ref_gen)
        before = _layers(model)
        placements = incmoe.hf.rebalance(model, extra_slots=2)
        after = _layers(model)
        # New layers with the chosen placements; the old ones closed.
        assert len(placements) == len(after) == len(before)
        assert [ly.placement for ly in after] == placements
        assert all(ly.closed for ly in before)
        E = model.config.num_experts
        for p in placements:
            assert len(p) == E and sum(len(rs) for rs in p) > E  # some expert replicated
        with torch.no_grad():
            assert _rel(model(x).logits, ref) <= FP32_TOL
            assert torch.equal(model.generate(x, **GEN), ref_gen)
        # A sample given by the caller: the prompts' routing of a second batch, every rank alike.
        k = model.config.num_experts_per_tok
        sample = [torch.stack([torch.randperm(E)[:k] for _ in range(6 + rank)])
                  for _ in placements]
        again = incmoe.hf.rebalance(model, sample=sample, extra_slots=1)
        assert [ly.placement for ly in _layers(model)] == again
        with torch.no_grad():
            assert torch.equal(model.generate(x, **GEN), ref_gen)
        # A bad sample on one rank: every rank raises, the layers stay.
        bad = [s[:, :3] for s in sample] if rank == 1 else sample
        kept = _layers(model)
        with pytest.raises(ValueError, match="sample\\[0\\] has shape" if rank == 1
                           else "rank\\(s\\) 1 refused their sample"):
            incmoe.hf.rebalance(model, sample=bad)
        assert _layers(model) == kept
        with torch.no_grad():
            assert torch.equal(model.generate(x, **GEN), ref_gen)
        del model, before, after, kept
        # Without keep_weights the weights are gone: a clear refusal, nothing collective.
        plain, _, _, _ = _reference(rank)
        incmoe.hf.expert_parallel(plain, comm, **LAYER)
        with pytest.raises(ValueError, match="without keep_weights=True"):
            incmoe.hf.rebalance(plain)
        with pytest.raises(ValueError, match="without keep_weights=True"):
            incmoe.hf.recover(plain)
        del plain


def test_rebalance_keeps_the_tokens(switch):
    """rebalance(): placements chosen from the routing the layers saw (and from a sample
    given), the layers rebuilt, greedy tokens and logits as before."""
    run_ranks(rebalance_body, 4, switch.address, new_job())


VICTIM = 2


def survive_body(rank, n, addr, job, placement, lost_expert, layer_kw=LAYER):
    model, x, ref, ref_gen = _reference(rank)
    # A killed process's connection fails at once: the timeouts only bound joins and waits on
    # a loaded machine (the layers' choice opens three communicators of its own, again after
    # the shrink).
    comm = incmoe.Communicator(addr, job, rank, n, timeout_ms=10000)
    incmoe.hf.expert_parallel(model, comm, placement=placement, keep_weights=True, **layer_kw)
    calls = []

    def die_mid_generate(mod, args):
        calls.append(1)
        if len(calls) == 4:  # the prefill and two decode steps done
            os._exit(0)

    if rank == VICTIM:
        model.register_forward_pre_hook(die_mid_generate)
    with torch.no_grad(), pytest.raises(incmoe.IncmoeError) as failed:
        model.generate(x, **GEN)
    assert "rank %d" % VICTIM in str(failed.value) + comm.error(), (str(failed.value), comm.error())
    if lost_expert is not None:
        with pytest.raises(ValueError, match="expert %d of model.layers.0.mlp has no live replica"
                           % lost_expert):
            incmoe.hf.recover(model)
        del model
        with pytest.raises(incmoe.IncmoeError):
            comm.close()
        return
    new = incmoe.hf.recover(model)
    olds = [r for r in range(n) if r != VICTIM]
    assert (new.rank, new.nranks) == (olds.index(rank), n - 1)
    less = [[olds.index(r) for r in rs if r != VICTIM] for rs in placement]
    assert all(ly.comm is new and ly.placement == less for ly in _layers(model))
    with torch.no_grad():  # the interrupted prompts again, on the survivors
        assert torch.equal(model.generate(x, **GEN), ref_gen)
        assert _rel(model(x).logits, ref) <= FP32_TOL
    del model
    new.close()
    with pytest.raises(incmoe.IncmoeError):
        comm.close()


@pytest.mark.expect_errors("rank 2 is killed mid-generate")
@pytest.mark.parametrize("path", ["forced", "layers' choice"])
def test_generation_survives_a_lost_rank(switch, path):
    """N=4, every expert on two ranks, rank 2 killed in the middle of generate: the survivors'
    generate raises naming it, recover() shrinks and re-shards, and the re-run prompts give
    the single-process model's tokens.  On one forced path (comm's algorithm, pipelined), and
    with every path left to the layers (they measure the three algorithms on communicators of
    their own, before the kill and again on the survivors)."""
    layer_kw = LAYER if path == "forced" else dict(timeout_ms=20000)
    run_ranks(survive_body, 4, switch.address, new_job(), _two_each(64, 4), None, layer_kw,
              lost={VICTIM})


@pytest.mark.expect_errors("rank 2 is killed mid-generate")
def test_an_expert_without_a_live_replica(switch):
    """The same, but expert 37 lived on rank 2 alone: recover() raises naming it."""
    placement = _two_each(64, 4)
    placement[37] = [VICTIM]
    run_ranks(survive_body, 4, switch.address, new_job(), placement, 37, lost={VICTIM})
