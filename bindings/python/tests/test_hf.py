"""incmoe.hf against the single-process transformers model.

Every rank builds the same seeded model, computes the single-process
reference on its own prompts, shards the model with expert_parallel and
computes the same again: prefill logits within 1e-4 relative (max |got -
ref| / max |ref|) and 16 greedy tokens identical in fp32; in bf16 each sparse
block's output within the layer tests' 1.5e-2 of transformers' own experts
on the same inputs (logits and tokens not compared: a router near a tie
flips on any rounding difference upstream).  Each of the four families at
N = 2 and 4, tiny configs (incmoe.hf.models), unequal prompt lengths per rank,
and at N = 2 a max_tokens small enough that a prefill runs as several layer
calls.  Then: one rank's prompts hit EOS first, the refusals (every rank gets
an error, none waits), a forward that stops between blocks on one rank and
one that a layer refuses, and from_pretrained of a checkpoint written here,
sharded over a torch.distributed group of the "incmoe" backend.
"""

import os
import socket
import subprocess
import sys
import weakref

import pytest
import torch

transformers = pytest.importorskip("transformers")

import incmoe  # noqa: E402
import incmoe.hf  # noqa: E402
from conftest import new_job, run_ranks  # noqa: E402
from test_moe import reference_moe  # noqa: E402
from incmoe.hf import models  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach a network
models.preload()  # once here, not in every forked rank

FP32_TOL, BF16_TOL = 1e-4, 1.5e-2
NEW_TOKENS = 16
GEN = dict(max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)


def _rel(got, ref):
    return ((got.double() - ref.double()).abs().max() / ref.double().abs().max()).item()


def _prompts(cfg, rank, batch=2):
    return models.prompts(cfg, batch, 5 + rank, seed=100 + rank)  # lengths differ per rank


def _tiny_with_reference(name, rank, seed):
    """A tiny `name` model, this rank's prompts and the single-process model's logits on them,
    taken before the model is sharded."""
    cfg = models.config(name, "tiny")
    x = _prompts(cfg, rank)
    model = models.build(cfg, seed=seed)
    with torch.no_grad():
        ref = model(x).logits
    return cfg, model, x, ref


def test_transformers_version(record_testsuite_property):
    """Which transformers these tests ran with: in the junit report (tools/quickstart
    prints it too); the [hf] extra of pyproject.toml names the range tested."""
    record_testsuite_property("transformers", transformers.__version__)
    assert transformers.__version__.split(".")[0] == "5"


def matches_body(rank, n, addr, job, name):
    cfg = models.config(name, "tiny")
    x = _prompts(cfg, rank)
    comm = incmoe.Communicator(addr, job, rank, n)
    mode, max_tokens = ("pipelined", 5) if n == 2 else ("baseline", 2048)

    model = models.build(cfg, seed=1)
    with torch.no_grad():
        ref = model(x, output_router_logits=True)
        ref_gen = model.generate(x, eos_token_id=None, **GEN)
        # The experts must matter: without them the logits move far beyond the tolerance.
        saved = [(b.experts.down_proj, b.experts.down_proj.detach().clone())
                 for b in model.modules() if hasattr(getattr(b, "experts", None), "down_proj")]
        for p, _ in saved:
            p.data.zero_()
        assert _rel(model(x).logits, ref.logits) > 1e3 * FP32_TOL
        for p, keep in saved:
            p.data.copy_(keep)
        assert torch.equal(model(x).logits, ref.logits)

    incmoe.hf.expert_parallel(model, comm, mode=mode, max_tokens=max_tokens)
    with torch.no_grad():
        got = model(x, output_router_logits=True)
        err = _rel(got.logits, ref.logits)
        assert err <= FP32_TOL, (name, n, err)
        # The router stayed: its logits are the model's own.
        assert len(got.router_logits) == len(ref.router_logits) > 0
        for a, b in zip(got.router_logits, ref.router_logits):
            assert _rel(a, b) <= FP32_TOL
        gen = model.generate(x, eos_token_id=None, **GEN)
    assert torch.equal(gen, ref_gen), (name, n, gen, ref_gen)

    # bf16: a router near a tie can pick other experts after any rounding
    # difference upstream, so the logits are not compared; each sparse block's
    # output is, against the float64 evaluation of the same (bf16) inputs and
    # weights, as the layer tests check incmoe.MoE.
    model = models.build(cfg, seed=1, dtype=torch.bfloat16)
    blocks = [m for m in model.modules() if hasattr(getattr(m, "experts", None), "gate_up_proj")]
    full = [(b.experts.gate_up_proj.detach(), b.experts.down_proj.detach()) for b in blocks]
    incmoe.hf.expert_parallel(model, comm, mode="baseline" if mode == "pipelined" else "pipelined")
    seen = []
    for b in blocks:
        # (a copy: Qwen2-MoE of transformers 5.0 adds the shared expert into it in place)
        b.experts.register_forward_hook(lambda mod, args, out: seen.append((args, out.clone())))
    with torch.no_grad():
        model(x)
        assert len(seen) == len(blocks)
        for (w13, w2), ((h, ids, w), out) in zip(full, seen):
            assert out.dtype == torch.bfloat16
            err = _rel(out, reference_moe(h, ids, w, w13, w2))
            assert err <= BF16_TOL, (name, n, "bf16", err)
    comm.close()


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("name", models.NAMES)
def test_matches_single_process(switch, name, n):
    run_ranks(matches_body, n, switch.address, new_job(), name)


def decode_body(rank, n, addr, job, name):
    """mode="decode": every forward within the layers' decode capacity (the prompts' and each
    generated token's) runs the decode step; logits and greedy tokens as the single-process
    model's, fp32."""
    cfg, model, x, ref = _tiny_with_reference(name, rank, seed=3)
    with torch.no_grad():
        ref_gen = model.generate(x, eos_token_id=None, **GEN)
    comm = incmoe.Communicator(addr, job, rank, n)
    incmoe.hf.expert_parallel(model, comm, mode="decode", algo=None)
    layers = [m.layer for m in model.modules() if isinstance(m, incmoe.hf.experts.IncmoeExperts)]
    with torch.no_grad():
        err = _rel(model(x).logits, ref)
        assert err <= FP32_TOL, (name, n, err)
        gen = model.generate(x, eos_token_id=None, **GEN)
    assert torch.equal(gen, ref_gen), (name, n, gen, ref_gen)
    assert layers and all(l.last_timing()["mode"] == "decode" for l in layers), [
        l.last_timing() for l in layers]
    comm.close()


@pytest.mark.parametrize("name", models.NAMES)
def test_decode_step_matches_single_process(switch, name):
    run_ranks(decode_body, 2, switch.address, new_job(), name)


def _eos_setup():
    """A seed and an EOS token such that rank 0's single prompt stops early
    while ranks 1..3's prompts never produce it within NEW_TOKENS tokens."""
    cfg = models.config("mixtral", "tiny")
    model = models.build(cfg, seed=2)
    with torch.no_grad():
        for seed in range(2, 40):
            model = models.build(cfg, seed=seed)
            gens = [model.generate(_prompts(cfg, r, batch=1 if r == 0 else 2), eos_token_id=None, **GEN)
                    for r in range(4)]
            new = [g[:, -NEW_TOKENS:] for g in gens]
            others = set(torch.cat([t.flatten() for t in new[1:]]).tolist())
            for step in (2, 3, 4):
                tok = int(new[0][0, step])
                if tok != 0 and tok not in others and tok not in new[0][0, :step].tolist():
                    return seed, tok, step
    raise AssertionError("no EOS token separates rank 0 from the others")


def eos_body(rank, n, addr, job, seed, eos):
    cfg = models.config("mixtral", "tiny")
    x = _prompts(cfg, rank, batch=1 if rank == 0 else 2)
    model = models.build(cfg, seed=seed)
    with torch.no_grad():
        ref = model.generate(x, eos_token_id=eos, **GEN)
        ref_logits = model(x).logits
        comm = incmoe.Communicator(addr, job, rank, n)
        incmoe.hf.expert_parallel(model, comm)
        got = model.generate(x, eos_token_id=eos, **GEN)
        assert torch.equal(got, ref), (rank, got, ref)
        if rank == 0:
            assert got.shape[1] < x.shape[1] + NEW_TOKENS and int(got[0, -1]) == eos
        else:
            assert got.shape[1] == x.shape[1] + NEW_TOKENS
        # Every rank is at the same forward again: one more prefill agrees.
        assert _rel(model(x).logits, ref_logits) <= FP32_TOL
    comm.close()


def routing_body(rank, n, addr, job, name, routing):
    _, model, x, ref = _tiny_with_reference(name, rank, seed=2)
    with torch.no_grad():
        ref_gen = model.generate(x, eos_token_id=None, **GEN)
    comm = incmoe.Communicator(addr, job, rank, n)
    if routing == "path":  # everything left to the layers: measured on their first calls
        incmoe.hf.expert_parallel(model, comm, routing="auto", mode="auto", algo="auto")
    else:
        incmoe.hf.expert_parallel(model, comm, routing=routing)
    with torch.no_grad():
        assert _rel(model(x).logits, ref) <= FP32_TOL
        assert torch.equal(model.generate(x, eos_token_id=None, **GEN), ref_gen)
    del model
    comm.close()


@pytest.mark.parametrize("routing", ["masked", "auto", "path"])
def test_routing(switch, routing):
    """routing="masked" / "auto" (incmoe.MoE's routing-aware dispatch and combine), and the
    whole path left to the layers (algo, mode and routing "auto": each layer measures the
    paths on its first call and when the token counts move, prefill to decode), give the
    single-process model's logits and tokens."""
    run_ranks(routing_body, 4, switch.address, new_job(), "olmoe", routing)


def default_body(rank, n, addr, job):
    _, model, x, ref = _tiny_with_reference("mixtral", rank, seed=5)
    comm = incmoe.Communicator(addr, job, rank, n)
    incmoe.hf.expert_parallel(model, comm)
    layers = [m.layer for m in model.modules() if hasattr(m, "layer")]
    assert layers and all((ly.mode, ly.algo, ly.routing) == ("auto", "auto", "auto") for ly in layers)
    with torch.no_grad():
        assert _rel(model(x).logits, ref) <= FP32_TOL
        first = [ly.last_timing() for ly in layers]
        assert _rel(model(x).logits, ref) <= FP32_TOL
        second = [ly.last_timing() for ly in layers]
    # The first block's first forward measured every path (three algorithms, two modes, two
    # routings, and the decode step on each algorithm: the prompts are within its capacity),
    # each once and the close ones again; the other blocks (one shape, one communicator) ran
    # its choice without measuring, and the second forward every block's kept choice: one
    # path for the whole model.
    t0 = first[0]
    assert t0["measured"] == 15 and 15 <= t0["measure_runs"] <= 45, t0
    for t in first[1:] + second:
        assert t["measured"] == 0 and (t["algo"], t["mode"], t["routing"]) == (
            t0["algo"], t0["mode"], t0["routing"]), (t0, t)
    del model, layers
    comm.close()


def test_the_default_is_the_layers_choice(switch):
    """expert_parallel(model, comm) with nothing else: every layer left to choose its path
    (algo, mode and routing "auto"), measured by the first block on the first forward and
    run by every block after, and the model's logits unchanged."""
    run_ranks(default_body, 2, switch.address, new_job())


def test_generate_one_rank_hits_eos_first(switch):
    seed, eos, step = _eos_setup()
    run_ranks(eos_body, 4, switch.address, new_job(), seed, eos)


def refusals_body(rank, n, addr, job):
    comm = incmoe.Communicator(addr, job, rank, n)
    tiny = models.config("olmoe", "tiny")
    # A family incmoe.hf does not know, on every rank, then on rank 1 only.
    llama = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=16,
                                     num_hidden_layers=1, num_attention_heads=4)
    with pytest.raises(ValueError, match="'llama'.*not a family"):
        incmoe.hf.expert_parallel(models.build(llama), comm)
    model = models.build(llama if rank == 1 else tiny)
    with pytest.raises(ValueError, match="not a family" if rank == 1 else "rank\\(s\\) 1 refused"):
        incmoe.hf.expert_parallel(model, comm)
    # Different configs: both ranks hear of it, with this rank's side.
    other = models.config("olmoe", "tiny", hidden=48 if rank == 1 else None)
    with pytest.raises(ValueError, match="differ.*ranks grouped.*0 \\| 1"):
        incmoe.hf.expert_parallel(models.build(other), comm)
    with pytest.raises(ValueError, match="routing is 'sparse'"):
        incmoe.hf.expert_parallel(models.build(tiny), comm, routing="sparse")
    with pytest.raises(ValueError, match="mode is 'fast'"):
        incmoe.hf.expert_parallel(models.build(tiny), comm, mode="fast")
    # Nothing was changed by the refusals, and the communicator still works.
    model = models.build(tiny)
    incmoe.hf.expert_parallel(model, comm)
    with pytest.raises(ValueError, match="sharded already"):
        incmoe.hf.expert_parallel(model, comm)
    with torch.no_grad():
        model(_prompts(tiny, rank))
    comm.close()


def uneven_body(rank, n, addr, job):
    with incmoe.Communicator(addr, job, rank, n) as comm:
        model = models.build(models.config("mixtral", "tiny"))
        with pytest.raises(ValueError, match="8 experts cannot be split evenly over 3 ranks"):
            incmoe.hf.expert_parallel(model, comm)


def test_refusals(switch):
    run_ranks(refusals_body, 2, switch.address, new_job())
    run_ranks(uneven_body, 3, switch.address, new_job())


def failures_body(rank, n, addr, job):
    # two layers, a sparse block in each
    cfg, model, x, ref = _tiny_with_reference("mixtral", rank, seed=4)
    comm = incmoe.Communicator(addr, job, rank, n)
    incmoe.hf.expert_parallel(model, comm)
    attn1 = model.model.layers[1].self_attn
    blocks = [layer.mlp for layer in model.model.layers]

    # Rank 1's forward stops between the two sparse blocks: its next forward
    # first completes the block rank 0 waits in, and both compute right.
    def boom(mod, args, kwargs):
        raise KeyError("injected")

    with torch.no_grad():
        if rank == 1:
            h = attn1.register_forward_pre_hook(boom, with_kwargs=True)
            with pytest.raises(KeyError, match="injected"):
                model(x)
            h.remove()
        else:
            assert _rel(model(x).logits, ref) <= FP32_TOL
        assert _rel(model(x).logits, ref) <= FP32_TOL

        # A block whose layer refuses its arguments (rank 1's router names an
        # expert that does not exist) fails that forward on every rank, and
        # the model's later forwards fail at once.
        def bad_ids(mod, args, out):
            return out[0], out[1], torch.full_like(out[2], cfg.num_local_experts)

        if rank == 1:
            blocks[0].gate.register_forward_hook(bad_ids)
        with pytest.raises((ValueError, incmoe.IncmoeError)):
            model(x)
        with pytest.raises(RuntimeError, match="earlier MoE forward of this model failed"):
            model(x)
    del model
    comm.close()


@pytest.mark.expect_errors("a forward fails on one rank and the layers after it on all")
def test_forward_failures(switch):
    run_ranks(failures_body, 2, switch.address, new_job())


def pretrained_body(rank, n, addr, path, store):
    import torch.distributed as dist

    os.environ["INCMOE_SWITCH"] = addr
    dist.init_process_group("incmoe", init_method="file://" + store, rank=rank, world_size=n)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    cfg = model.config
    # The forwards differ in number per rank; finish() lets the one with fewer wait.
    xs = [_prompts(cfg, rank + 2 * i) for i in range(rank + 1)]
    with torch.no_grad():
        refs = [model(x).logits for x in xs]
        incmoe.hf.expert_parallel(model, dist.group.WORLD)
        for x, ref in zip(xs, refs):
            assert _rel(model(x).logits, ref) <= FP32_TOL
        incmoe.hf.finish(model)
    # Dropping the model frees its layers at once (no cycle waits for a gc
    # pass), before the group closes the communicator they use.
    layers = [weakref.ref(m.layer) for m in model.modules() if hasattr(m, "layer")]
    assert layers
    del model
    assert all(ref() is None for ref in layers)
    dist.destroy_process_group()


def test_from_pretrained_local_directory(switch, tmp_path, store_path):
    cfg = models.config("qwen2_moe", "tiny")  # the family with a shared expert and dense layers
    models.build(cfg, seed=3).save_pretrained(tmp_path)
    run_ranks(pretrained_body, 2, switch.address, str(tmp_path), store_path)


PREFILL_VARIANTS = ["agrs", "ring", "baseline", "pipelined", "masked", "a2a", "auto"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_prefill_benchmark_runs(dtype):
    """python -m incmoe.bench.prefill, embedded, as its README shows it: a
    row per variant (the incmoe ring baseline and the layer's own choice
    too), every one with the AgRs baseline's logits (fp32: 1e-4 relative;
    bf16, agrs in bf16 too: the bf16 tolerance), its MoE time, collectives
    split or "overlapped" as its layers ran, the embedded switch's CPU per
    prefill, and each timed prefill on a "# prefills" line."""
    env = dict(os.environ)
    env.pop("INCMOE_SWITCH", None)  # embedded: it starts its own switch
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    cmd = [sys.executable, "-m", "incmoe.bench.prefill", "--size", "tiny", "-N", "2", "-B", "2",
           "-L", "8", "-n", "2", "-w", "0", "--generate", "2", "--dtype", dtype,
           "--variants", ",".join(PREFILL_VARIANTS)]
    r = subprocess.run(cmd, cwd=here, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    head = [c.strip() for c in next(x for x in lines if x.startswith("| variant")).split("|")]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")] for line in lines
            if line.startswith("| ") and not line.startswith("| variant")}
    assert list(rows) == PREFILL_VARIANTS, r.stdout
    col = {name: head.index(name) for name in head if name}
    tol = FP32_TOL if dtype == "float32" else BF16_TOL
    for name, cols in rows.items():
        assert float(cols[col["max rel. logit diff vs agrs"]]) <= tol, (name, r.stdout)
        assert float(cols[col["MoE ms (share)"]].split()[0]) > 0, (name, r.stdout)
        coll = cols[col["MoE collectives ms (share)"]]
        overlapped = name in ("pipelined", "masked")
        assert (coll == "overlapped") == overlapped or name == "auto", (name, r.stdout)
        if coll != "overlapped":
            assert float(coll.split()[0]) > 0, (name, r.stdout)
        sw = cols[col["switch CPU s per prefill"]]
        assert (sw == "-") == (name == "agrs"), (name, r.stdout)
        prefills = [x for x in lines if x.startswith("# prefills %s " % name)]
        assert len(prefills) == 1 and len(prefills[0].split("ttft_ms=")[1].split()[0].split(",")) == 2
    assert "switch CPU from /proc/" in r.stdout, r.stdout
    assert "# paths ring ring/baseline/full ring/baseline/full" in lines, r.stdout
    assert "olmoe-tiny" in r.stdout and "N=2 ranks x B=2 prompts x L=8 tokens" in r.stdout
    assert dtype in r.stdout


def test_prefill_finds_a_launched_switch():
    """The prefill bench finds a switch started elsewhere (as tools/testbed starts it) by
    its --listen address, and only that one; its CPU time reads from /proc/PID/stat."""
    from incmoe.bench import prefill
    from incmoe.switch import find_switchd

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    addr = "127.0.0.1:%d" % port
    proc = subprocess.Popen([find_switchd(), "--listen", addr], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        assert b"listening" in proc.stdout.readline()
        assert prefill.switch_pid(addr) == proc.pid
        assert prefill.switch_pid("127.0.0.1:%d" % (port + 1 if port < 65535 else port - 1)) is None
        assert prefill.switch_pid(addr, known=12345) == 12345
        cpu = prefill.cpu_seconds(proc.pid)
        assert cpu is not None and cpu >= 0
    finally:
        proc.terminate()
        proc.wait()
    assert prefill.cpu_seconds(proc.pid) is None
