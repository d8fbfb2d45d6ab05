"""Time to first token of an expert-parallel Hugging Face MoE model: the AgRs
baseline (vLLM's default path, over gloo) against incmoe.

    python -m incmoe.bench.prefill [--model olmoe] [-N 4] [-B 4] [-L 128]      embedded
    tools/testbed run -- env PYTHONPATH=$PWD/bindings/python python3 -m incmoe.bench.prefill \\
        --rank {rank} -N {nranks} --switch {switch} --master 10.213.0.1:29500 ...  one rank each

Embedded, it starts an incmoe-switchd (unless --switch or INCMOE_SWITCH names
one) and forks N ranks; with --rank it is one rank of a job started
elsewhere (tools/testbed), rank 0 (at --master) holding torch.distributed's
store.  Every rank builds the same model from a config made in code (the
family's E, k and block structure; --size real for the published shape)
with seeded weights, and prefills its own B prompts of L seeded random
tokens, once per variant:

    agrs       vLLM's AgRsAll2AllManager path over gloo: all-gather hidden states,
               top-k weights and ids, local experts on every token, reduce-scatter
    ring       incmoe.MoE on the ring algorithm, mode baseline, full routing: the
               AgRs path on incmoe's own ring collectives (what auto can fall back to)
    baseline   incmoe.MoE, mode baseline: in-network AllGather, experts, ReduceScatter
    pipelined  incmoe.MoE, mode pipelined: bands, AllGather and ReduceScatter in flight together
    masked     pipelined with routing-aware dispatch and combine
    a2a        routing-aware dispatch and combine over the ranks' own links, the
               "a2a" algorithm, mode baseline
    auto       incmoe.MoE's own choice (algo, mode and routing "auto"), as
               incmoe.hf.expert_parallel gives it by default
    inc-auto   the in-network algorithm, mode and routing the layer's choice
    a2a-auto   the a2a algorithm, mode and routing the layer's choice
    inc-decode the in-network algorithm, mode decode: the layer's decode step for
               forwards within its capacity (a decode step's), pipelined masked
               otherwise (the prefill)
    a2a-decode the same over the a2a algorithm

It reports, per variant, TTFT (one prefill of the batch, the slowest rank's,
median, min-max and p90 over the timed iterations), prefill tokens/s (N*B*L
over the median), the time inside the sparse blocks and inside their
collectives (agrs's calls; an incmoe layer's AllGather, ReduceScatter,
dispatch, combine and header exchange in baseline mode; "overlapped" where a
layer ran pipelined, its collectives hidden under its experts), the switch
process's CPU seconds per timed prefill (utime + stime of the incmoe-switchd
serving the job, from /proc/PID/stat, read by rank 0 around each timed
prefill; see switch_pid), the TTFT agrs's non-MoE time plus each variant's
own MoE time predicts (Amdahl), and how far each variant's last-position
logits are from agrs's.  Each variant's timed prefills are also printed one
by one ("# prefills" lines, read by bench/data/issue27/ttft/summary.py).
--generate K adds K greedy decode steps (EOS off) and reports the time per
output token; with --decode-batches 1,4,16 also at those batches per rank
(B prompts of L tokens each, after an untimed warm-up generate unless -w 0,
so that a layer's own choice for that decode step is made untimed), in a
decode table per variant with each batch's ratio to agrs and the path each
layer's last decode step ran ("# decode paths" lines).  The auto, inc-auto
and a2a-auto variants leave the mode (and routing) to the layer, so a decode
step runs the layer's decode path wherever the layer has one and chooses it.
"""

import argparse
import dataclasses
import gc
import math
import multiprocessing
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist

import incmoe
from incmoe.hf import expert_parallel, models

from .tpot import decode_batches, generate_tpot


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    what: str
    algo: str = None  # None: the AgRs baseline over gloo
    mode: str = None
    routing: str = None


VARIANTS = {
    v.name: v
    for v in (
        Variant("agrs", "AgRs baseline: vLLM's allgather_reducescatter path over gloo"),
        Variant("ring", "incmoe ring baseline: ring AllGather, experts, ring ReduceScatter over "
                "the ranks' links (what auto can fall back to)", "ring", "baseline", "full"),
        Variant("baseline", "incmoe baseline: in-network AllGather, experts, ReduceScatter",
                "inc", "baseline", "full"),
        Variant("pipelined", "incmoe pipelined, full routing", "inc", "pipelined", "full"),
        Variant("masked", "incmoe pipelined, masked routing", "inc", "pipelined", "masked"),
        Variant("a2a", "routing-aware dispatch/combine over the ranks' links (algo a2a), "
                "mode baseline", "a2a", "baseline", "masked"),
        Variant("auto", "incmoe.MoE's measured choice of algorithm, mode and routing, as "
                "incmoe.hf.expert_parallel gives it by default (each layer's first forward, "
                "the warm-up, measures the paths)", "auto", "auto", "auto"),
        Variant("inc-auto", "the in-network algorithm with the layer's measured choice of "
                "mode and routing (a decode step's: its decode path, where it has one)", "inc",
                "auto", "auto"),
        Variant("a2a-auto", "the a2a algorithm with the layer's measured choice of mode and "
                "routing (a decode step's: its decode path, where it has one)", "a2a", "auto",
                "auto"),
        Variant("inc-decode", "the in-network algorithm, mode decode: the decode step for "
                "forwards within the layer's capacity, pipelined otherwise", "inc", "decode",
                "masked"),
        Variant("a2a-decode", "the a2a algorithm, mode decode: the decode step for forwards "
                "within the layer's capacity, pipelined otherwise", "a2a", "decode", "masked"),
    )
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


# ------------------------------------------------------------------ the switch's CPU


def switch_pid(switch, known=None):
    """The PID of the incmoe-switchd listening at `switch` ("host:port"), or None.

    known: the PID of a switch this process started (embedded).  Otherwise the
    switch was started elsewhere (tools/testbed runs it in its own network
    namespace, but every namespace shares the PID namespace): the one process
    whose command line is incmoe-switchd with `--listen` followed by exactly
    this address.  The testbed starts it that way; the address holds the
    testbed's id (10.213.ID.254), so another testbed's switch never matches.
    """
    if known is not None:
        return known
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if not argv or os.path.basename(argv[0]) not in ("incmoe-switchd", "lt-incmoe-switchd"):
            continue
        if any(a == "--listen" and b == switch for a, b in zip(argv, argv[1:])):
            found.append(int(d))
    return found[0] if len(found) == 1 else None


def cpu_seconds(pid):
    """utime + stime of pid in seconds (/proc/PID/stat), None if it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return None
    # Fields after the command name, which may hold spaces: state is field 3,
    # utime and stime fields 14 and 15.
    rest = stat[stat.rindex(")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ one rank


def _shard(model, v, args, rank, switch, job):
    if v.algo is None:
        from .agrs import agrs_parallel

        return agrs_parallel(model), None
    # auto: the layers hold the ring and a2a communicators beside this in-network one.
    comm_algo = "inc" if v.algo == "auto" else v.algo
    comm = incmoe.Communicator(switch, job, rank, args.nranks, algo=comm_algo)
    expert_parallel(model, comm, routing=v.routing, mode=v.mode,
                    max_tokens=args.max_tokens or max([args.batch] + args.decode_batches) *
                    args.length,
                    algo="auto" if v.algo == "auto" else None)
    return model, comm


def _measure(model, x, args, sw_pid, prompts):
    """Times args.iters prefills after args.warmup.  sw_pid (rank 0 only, None
    elsewhere or when unknown): the switch whose CPU time each timed prefill
    takes, read between barriers that every rank passes before and after it."""
    step = model._incmoe_step
    rows, logits, switch_cpu = [], None, []
    with torch.no_grad():
        for i in range(args.warmup + args.iters):
            dist.barrier()
            c0 = cpu_seconds(sw_pid) if sw_pid is not None else None
            step.moe_seconds = step.collective_seconds = 0.0
            step.collectives_overlapped = False
            t0 = time.perf_counter()
            out = model(x)
            out.logits[:, -1].argmax(-1)  # the first token
            t = time.perf_counter() - t0
            dist.barrier()
            c1 = cpu_seconds(sw_pid) if c0 is not None else None
            if i >= args.warmup:
                coll = None if step.collectives_overlapped else step.collective_seconds
                rows.append((t, step.moe_seconds, coll))
                if c1 is not None:
                    switch_cpu.append(c1 - c0)
            if logits is None:
                logits = out.logits[:, -1].float().clone()
            del out
        paths = _paths(model)  # the prefill's (decode steps may choose again)
        tpot = generate_tpot(model, x, args.generate) if args.generate else None
        decode = decode_batches(model, prompts, args, _paths) if args.generate else {}
    return {"rows": rows, "logits": logits, "tpot": tpot, "switch_cpu": switch_cpu,
            "paths": paths, "decode": decode}


def _paths(model):
    """The path each incmoe layer's last forward ran ("algo/mode/routing"), in block order."""
    out = []
    for ex in model._incmoe_step.experts:
        layer = getattr(ex, "layer", None)
        if layer is not None:
            algo, mode, routing = layer.path
            out.append("%s/%s/%s" % (layer.comm.algo if algo == "comm" else algo, mode, routing))
    return out


def rank_main(args, rank, switch, master, known_pid=None):
    torch.set_num_threads(args.threads)
    host, port = master.rsplit(":", 1)
    os.environ.update(MASTER_ADDR=host, MASTER_PORT=port)
    # On the testbed, gloo goes over the rank's shaped link, as UCX does.
    dev = os.environ.get("UCX_NET_DEVICES", "")
    if "GLOO_SOCKET_IFNAME" not in os.environ and dev and "," not in dev and dev != "all":
        os.environ["GLOO_SOCKET_IFNAME"] = dev.split(":")[0]
    dist.init_process_group("gloo", rank=rank, world_size=args.nranks)
    box = [int.from_bytes(os.urandom(8), "little") >> 2 if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    job = box[0]
    cfg = _config(args)
    x = models.prompts(cfg, args.batch, args.length, seed=args.seed + 1000 + rank)

    def prompts(batch):  # a decode batch's prompts, this rank's own
        return models.prompts(cfg, batch, args.length, seed=args.seed + 2000 + rank)
    sw_pid = switch_pid(switch, known_pid) if rank == 0 else None
    results = {}
    for vi, name in enumerate(args.variants):
        model = models.build(cfg, seed=args.seed, dtype=DTYPES[args.dtype])
        model, comm = _shard(model, VARIANTS[name], args, rank, switch, job + vi)
        results[name] = _measure(model, x, args, sw_pid, prompts)
        del model
        gc.collect()
        if comm is not None:
            comm.close()
    everyone = [None] * args.nranks if rank == 0 else None
    dist.gather_object(results, everyone, dst=0)
    if rank == 0:
        report(args, cfg, everyone, switch, sw_pid)
    # Every rank leaves gloo together: a rank that tore its group down while rank 0 was still
    # reporting once ended in torch's "terminate called without an active exception" (SIGABRT).
    dist.barrier()
    dist.destroy_process_group()


# ------------------------------------------------------------------ report


def _p90(v):
    s = sorted(v)
    return s[max(0, math.ceil(0.9 * len(s)) - 1)]


def _summary(per_rank, name):
    """Per timed iteration the slowest rank's (TTFT, MoE, collectives); medians.
    Collectives are None where some layer ran pipelined (overlapped)."""
    its = []
    for i in range(len(per_rank[0][name]["rows"])):
        its.append(max((r[name]["rows"][i] for r in per_rank), key=lambda row: row[0]))
    ttft = [t for t, _, _ in its]
    tpots = [r[name]["tpot"] for r in per_rank if r[name]["tpot"] is not None]
    split = all(c is not None for _, _, c in its)
    sw = per_rank[0][name]["switch_cpu"]
    return {
        "ttfts": ttft, "moes": [m for _, m, _ in its],
        "colls": [c for _, _, c in its] if split else None,
        "ttft": statistics.median(ttft), "p90": _p90(ttft),
        "moe": statistics.median(m for _, m, _ in its),
        "coll": statistics.median(c for _, _, c in its) if split else None,
        "share": statistics.median(c / t for t, _, c in its) if split else None,
        "moe_share": statistics.median(m / t for t, m, _ in its),
        "switch_cpu": statistics.median(sw) if sw else None, "switch_cpus": sw,
        "tpot": max(tpots) if tpots else None,
    }


def _logit_gap(per_rank, name, ref):
    gaps = []
    for r in per_rank:
        a, b = r[name]["logits"].double(), r[ref]["logits"].double()
        gaps.append(((a - b).abs().max() / b.abs().max()).item())
    return max(gaps)


def _header(args, cfg, switch, sw_pid):
    import transformers

    mbps = os.environ.get("TESTBED_MBPS")
    print("# incmoe.bench.prefill: %s" % cfg.incmoe_shape)
    print("# %s, N=%d ranks x B=%d prompts x L=%d tokens, %d timed prefills after %d warm-up, "
          "seed %d; torch %d threads per rank; transformers %s"
          % (args.dtype, args.nranks, args.batch, args.length, args.iters, args.warmup, args.seed,
             args.threads, transformers.__version__))
    print("# switch %s (%s)%s; switch CPU from %s"
          % (switch, "embedded" if args.rank is None else "launched",
             ", testbed rank links %s Mbit/s" % mbps if mbps else "",
             "/proc/%d/stat" % sw_pid if sw_pid is not None else "nowhere (its PID not found)"))
    for name in args.variants:
        print("#   %-9s %s" % (name, VARIANTS[name].what))
    print("# TTFT: one prefill of the batch, the slowest rank per iteration; MoE: time in the "
          "sparse blocks; collectives: their dispatch and combine calls (share of TTFT; "
          "\"overlapped\" where a layer ran pipelined); switch CPU: utime + stime of the "
          "incmoe-switchd per timed prefill; Amdahl: the TTFT ratio agrs's non-MoE time plus "
          "this variant's MoE time predicts")


def _raw_lines(s, per_rank):
    """One line per variant with every timed prefill (milliseconds, switch CPU in
    seconds), and the path each incmoe layer ran: what summary scripts read."""
    for name, v in s.items():
        fmt = lambda xs, k=1e3: ",".join("%.1f" % (x * k) for x in xs) if xs else "-"
        print("# prefills %s ttft_ms=%s moe_ms=%s coll_ms=%s switch_cpu_s=%s" % (
            name, fmt(v["ttfts"]), fmt(v["moes"]), fmt(v["colls"]),
            ",".join("%.2f" % x for x in v["switch_cpus"]) if v["switch_cpus"] else "-"))
        paths = per_rank[0][name]["paths"]
        if paths:
            print("# paths %s %s" % (name, " ".join(paths)))


def _row(name, v, r0, ref, per_rank, args):
    N, B, L = args.nranks, args.batch, args.length
    toks = N * B * L / v["ttft"]
    coll = ("%.1f (%.0f%%)" % (v["coll"] * 1e3, 100 * v["share"]) if v["coll"] is not None
            else "overlapped")
    sw = "%.2f" % v["switch_cpu"] if v["switch_cpu"] is not None and VARIANTS[name].algo else "-"
    amdahl = (r0["ttft"] - r0["moe"] + v["moe"]) / r0["ttft"]
    row = "| %s | %.1f | %.1f-%.1f | %.1f | %.0f | %.3f | %.2f | %.1f (%.0f%%) | %s | %s | %.3f | %.1e |" % (
        name, v["ttft"] * 1e3, min(v["ttfts"]) * 1e3, max(v["ttfts"]) * 1e3, v["p90"] * 1e3, toks,
        v["ttft"] / r0["ttft"], r0["ttft"] / v["ttft"], v["moe"] * 1e3, 100 * v["moe_share"], coll,
        sw, amdahl, _logit_gap(per_rank, name, ref))
    if args.generate:
        row += " %.2f |" % (v["tpot"] * 1e3)
    return row


def _decode_table(args, per_rank):
    """Per variant the slowest rank's ms per output token at each decode batch, its ratio to
    agrs's, and the path of each layer's last decode step."""
    if not args.decode_batches:
        return
    tpot = {name: {B: max(r[name]["decode"][B]["tpot"] for r in per_rank)
                   for B in args.decode_batches} for name in args.variants}
    ref = "agrs" if "agrs" in tpot else None
    print("# decode: ms per output token, the slowest rank's, %d greedy steps at B prompts "
          "per rank (of L=%d tokens), after an untimed 1-step generate%s"
          % (args.generate, args.length, "" if args.warmup > 0 else " (none: -w 0)"))
    head = "| decode variant |" + "".join(" B=%d ms/token |" % B for B in args.decode_batches)
    if ref:
        head += "".join(" B=%d / %s |" % (B, ref) for B in args.decode_batches)
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for name in args.variants:
        row = "| %s |" % name + "".join(" %.2f |" % (tpot[name][B] * 1e3)
                                         for B in args.decode_batches)
        if ref:
            row += "".join(" %.3f |" % (tpot[name][B] / tpot[ref][B])
                           for B in args.decode_batches)
        print(row, flush=True)
    for name in args.variants:
        for B in args.decode_batches:
            paths = per_rank[0][name]["decode"][B]["paths"]
            if paths:
                print("# decode paths %s B=%d %s" % (name, B, " ".join(paths)))


def report(args, cfg, per_rank, switch, sw_pid):
    _header(args, cfg, switch, sw_pid)
    s = {name: _summary(per_rank, name) for name in args.variants}
    ref = "agrs" if "agrs" in s else args.variants[0]
    head = ("| variant | TTFT median ms | TTFT min-max ms | TTFT p90 ms | prefill tok/s "
            "| TTFT / %s | tok/s / %s | MoE ms (share) | MoE collectives ms (share) "
            "| switch CPU s per prefill | Amdahl TTFT / %s | max rel. logit diff vs %s |"
            % (ref, ref, ref, ref))
    if args.generate:
        head += " ms per output token |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for name in args.variants:
        print(_row(name, s[name], s[ref], ref, per_rank, args), flush=True)
    _raw_lines(s, per_rank)
    _decode_table(args, per_rank)


# ------------------------------------------------------------------ launch


def _config(args):
    return models.config(args.model, args.size, layers=args.layers, hidden=args.hidden,
                         intermediate=args.intermediate)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _embedded(args):
    models.preload()  # once here, not in every forked rank
    sw = None
    switch = args.switch or os.environ.get("INCMOE_SWITCH")
    if not switch:
        sw = incmoe.Switch()
        switch = sw.address
    master = args.master or "127.0.0.1:%d" % _free_port()
    ctx = multiprocessing.get_context("fork")
    known = sw.proc.pid if sw is not None else None
    procs = [ctx.Process(target=rank_main, args=(args, r, switch, master, known))
             for r in range(args.nranks)]
    for p in procs:
        p.start()
    rc = 0
    try:
        # The first rank to fail ends the run: the others would wait for it.
        live = list(procs)
        while live:
            for p in list(live):
                p.join(0.2)
                if p.exitcode is not None:
                    live.remove(p)
                    if p.exitcode != 0:
                        rc = 1
            if rc:
                for p in live:
                    p.kill()
                break
    finally:
        for p in procs:
            p.join()
        if sw is not None:
            sw.stop()
    return rc


def parse(argv=None):
    ap = argparse.ArgumentParser(prog="python -m incmoe.bench.prefill",
                                 description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="olmoe", choices=models.NAMES)
    ap.add_argument("--size", default="bench", choices=models.SIZES,
                    help="bench: H=512, 4 layers (default); real: the published config; tiny")
    ap.add_argument("--layers", type=int, help="decoder layers (default: the size's)")
    ap.add_argument("--hidden", type=int, help="H (bench and tiny sizes)")
    ap.add_argument("--intermediate", type=int, help="the experts' I (bench and tiny sizes)")
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("-N", "--nranks", type=int, default=4)
    ap.add_argument("-B", "--batch", type=int, default=4, help="prompts per rank")
    ap.add_argument("-L", "--length", type=int, default=128, help="tokens per prompt")
    ap.add_argument("--variants", default="agrs,baseline,pipelined",
                    help="comma-separated, of %s" % ", ".join(VARIANTS))
    ap.add_argument("-n", "--iters", type=int, default=5, help="timed prefills per variant")
    ap.add_argument("-w", "--warmup", type=int, default=1, help="untimed prefills first")
    ap.add_argument("--generate", type=int, default=0, metavar="K", help="K decode steps after")
    ap.add_argument("--decode-batches", default="", metavar="B1,B2,...",
                    help="with --generate: also K decode steps at each of these batches per "
                    "rank (e.g. 1,4,16)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, help="torch threads per rank (default: cores / N)")
    ap.add_argument("--max-tokens", type=int, help="incmoe.MoE max_tokens (default: B*L)")
    ap.add_argument("--rank", type=int, help="run as this rank of a job launched elsewhere")
    ap.add_argument("--switch", help="host:port of incmoe-switchd (default: INCMOE_SWITCH, "
                    "else embedded starts one)")
    ap.add_argument("--master", help="host:port of rank 0's torch.distributed store (needed "
                    "with --rank; embedded: a free local port)")
    args = ap.parse_args(argv)
    args.variants = [v for v in args.variants.split(",") if v]
    for v in args.variants:
        if v not in VARIANTS:
            ap.error("variant %r: expected one of %s" % (v, ", ".join(VARIANTS)))
    if not args.variants:
        ap.error("no variant")
    for name in ("nranks", "batch", "length", "iters"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name)
    if args.warmup < 0 or args.generate < 0:
        ap.error("--warmup and --generate must be >= 0")
    try:
        args.decode_batches = [int(b) for b in args.decode_batches.split(",") if b]
    except ValueError:
        ap.error("--decode-batches %r: expected batches per rank such as 1,4,16"
                 % args.decode_batches)
    if any(b < 1 for b in args.decode_batches) or \
            len(set(args.decode_batches)) != len(args.decode_batches):
        ap.error("--decode-batches: each batch at least 1, each once")
    if args.decode_batches and not args.generate:
        ap.error("--decode-batches needs --generate K (the decode steps to time)")
    if args.rank is not None:
        if not 0 <= args.rank < args.nranks:
            ap.error("--rank %d: expected 0..%d" % (args.rank, args.nranks - 1))
        args.switch = args.switch or os.environ.get("INCMOE_SWITCH")
        if not args.switch or not args.master:
            ap.error("--rank needs --switch (or INCMOE_SWITCH) and --master")
    if args.threads is None:
        args.threads = max(1, (os.cpu_count() or 1) // args.nranks)
    try:
        _config(args)
    except ValueError as e:
        ap.error(str(e))
    return args


def main(argv=None):
    args = parse(argv)
    if args.rank is None:
        return _embedded(args)
    rank_main(args, args.rank, args.switch, args.master)
    return 0


if __name__ == "__main__":
    sys.exit(main())
