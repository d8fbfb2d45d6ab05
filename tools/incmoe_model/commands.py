"""The commands time, rows and predict."""

import argparse

from .presets import MODELS, ModelError, PREDICT_MODELS, PREDICT_N, PRESETS
from .units import fmt_bytes, fmt_rate, fmt_time, route_text, table
from .routing import kbar_uniform, route_stats, uniform_stats
from .flows import FULL_OPS, MASKED_OPS
from .tree import build_tree, rank_range, tree_text
from .params import params_from
from .collective import collective_time, traffic
from .lowlat import ll_time
from .layer import moe_time
from .switchmem import job_memory, line_rate_credits


def print_decode_time(p, algo):
    r = moe_time(p, "decode", algo, "masked")
    print(f"moe decode algo {algo}: N={p.N} E={p.E} k={p.k} route {route_text(p.route)} "
          f"T={p.tokens:g} H={p.hidden} I={p.inter}")
    print(f"  time {fmt_time(r['total'])} = low-latency dispatch {fmt_time(r['dispatch'])} + "
          f"FFN {fmt_time(r['ffn'])} + low-latency combine {fmt_time(r['combine'])}")
    print(f"  decode bound {fmt_time(r['bound'])}; time / bound {r['total'] / r['bound']:.3f}"
          if r["bound"] > 0 else "  decode bound 0")
    return 0


def print_ll_time(p, op, algo):
    stats = route_stats(p)
    t = ll_time(op, algo, p, stats)
    print(f"{op} algo {algo}, low-latency form: N={p.N}, T={p.tokens:g} rows of {p.row} B, "
          f"E={p.E} k={p.k} route {route_text(p.route)}, {fmt_rate(p.rate_bps)} per rank link")
    print(f"  busiest rank and direction {fmt_bytes(t.busiest)}; up {fmt_bytes(max(t.up))}, "
          f"down {fmt_bytes(max(t.down))}")
    print(f"  time {fmt_time(t.total)} = hops {fmt_time(t.hops)} + max(links in sequence "
          f"{fmt_time(t.links)}, switch work {fmt_time(t.switch)})")
    print(f"  bound {fmt_time(t.bound)}; time / bound {t.total / t.bound if t.bound else 0:.3f}")
    print(f"  its largest message takes {t.credits} credits of {fmt_bytes(p.chunk)} (the job "
          f"grants {p.credits})" + ("" if t.fits else ": over them, the form refuses it"))
    return 0


def cmd_time(args, preset):
    p = params_from(args, preset)
    if args.op == "moe" and args.mode == "decode":
        return print_decode_time(p, args.algo)
    if args.form == "ll":
        return print_ll_time(p, args.op, args.algo)
    if args.op == "moe":
        r = moe_time(p, args.mode, args.algo, args.routing, args.bands)
        print(f"moe {args.mode} algo {args.algo} routing {args.routing}: N={p.N} E={p.E} "
              f"k={p.k} route {route_text(p.route)} T={p.tokens:g} H={p.hidden} I={p.inter}")
        print(f"  time {fmt_time(r['total'])}   bands {r['bands']}   FFN {fmt_time(r['ffn'])}"
              f"   header {fmt_time(r['header'])}"
              + (f"   collectives {fmt_time(r['comm'])}" if r["comm"] is not None else ""))
        return 0
    stats = route_stats(p) if args.op in MASKED_OPS else None
    t = collective_time(args.op, args.algo, p, stats)
    what = (f"{fmt_bytes(p.gathered)}" if args.op in FULL_OPS else
            f"T={p.tokens:g} rows of {p.row} B, E={p.E} k={p.k} route {route_text(p.route)}")
    print(f"{args.op} algo {args.algo}: N={p.N}, {what}, {fmt_rate(p.rate_bps)} per rank link")
    if p.tree:
        sizes = build_tree(p.tree, p.N).leaf_sizes()
        print(f"  tree {tree_text(p.tree)}: {len(p.tree)} levels, {len(sizes)} leaves of "
              f"{'+'.join(str(n) for n in sizes)} ranks, {fmt_rate(p.uplink_rate_bps)} per up-link")
    if stats is not None:
        print(f"  k-bar {stats.kbar():.4f} ({'exact' if stats.exact else f'{p.samples} samples'})")
    tr = t.traffic
    switches = "switches" if tr.switches else "switch"
    print(f"  busiest rank and direction {fmt_bytes(t.busiest)}; up {fmt_bytes(max(tr.up))}, "
          f"down {fmt_bytes(max(tr.down))}; {switches} in {fmt_bytes(tr.sw_in)}, out "
          f"{fmt_bytes(tr.sw_out)}, {tr.sw_msgs} messages{'; small path' if tr.small else ''}")
    if tr.links:
        shown = tr.links if len(tr.links) <= 16 else \
            sorted(tr.links, key=lambda ln: -max(ln.up, ln.down))[:16]
        print("  up-links (level, ranks below: up, down): " + "; ".join(
            f"{ln.level}, {rank_range(ln.lo, ln.hi)}: {fmt_bytes(ln.up)}, "
            f"{fmt_bytes(ln.down)}"
            for ln in shown) + ("" if shown is tr.links else f"; ... (16 busiest of "
                                                               f"{len(tr.links)})"))
        print(f"  busiest up-link and direction {fmt_bytes(t.uplink_busiest)}: "
              f"{t.uplink_ratio:.3f} x the busiest rank link's")
        print(f"  time {fmt_time(t.total)} = hops {fmt_time(t.hops)} + store-and-forward "
              f"{fmt_time(t.sf)} + max(rank link {fmt_time(t.rank_link)}, up-link "
              f"{fmt_time(t.uplink)}, switch CPU {fmt_time(t.switch_cpu)})")
    else:
        print(f"  time {fmt_time(t.total)} = hops {fmt_time(t.hops)} + store-and-forward "
              f"{fmt_time(t.sf)} + max(rank link {fmt_time(t.rank_link)}, switch link "
              f"{fmt_time(t.switch_link)}, switch CPU {fmt_time(t.switch_cpu)})")
    print(f"  bound {fmt_time(t.bound)}; time / bound {t.total / t.bound if t.bound else 0:.3f}"
          + (f"; up-link bound {fmt_time(t.uplink_bound)}" if tr.links else ""))
    return 0


def rows_per_direction(N, E, k):
    """Issue 18's second table, rows per rank and direction in units of T:
    masked (1 + k-bar, every token once up), its exact count (a token whose
    experts are all its owner's never leaves), a2a, full in-network, ring."""
    kb = kbar_uniform(N, E, k)
    st = uniform_stats(N, E, k)
    return {"kbar": kb, "masked": 1 + kb, "masked_exact": (1 - st.only[0]) + kb,
            "a2a": 2 * kb, "full": float(N), "ring": 2.0 * (N - 1)}


def cmd_rows(args, preset):
    names = args.model_list or ["mixtral", "olmoe", "qwen3-30b-a3b", "deepseek-v3"]
    ns = args.n_list or [4, 8, 16, 32, 64]
    print("Full AllGather bytes / routing's bytes, (N-1)/k-bar, uniform routing:\n")
    rows = []
    for name in names:
        m = MODELS[name]
        rows.append([f"{m['name']} ({m['E']}, {m['k']})"] +
                    [f"{(n - 1) / kbar_uniform(n, m['E'], m['k']):.2f}" if n <= m["E"] else "–"
                     for n in ns])
    print(table(["model (E, k)"] + [f"N={n}" for n in ns], rows))
    print("\nRows per rank and link direction with dispatch || combine, in units of T:\n")
    rows = []
    for name in names:
        m = MODELS[name]
        for n in ns:
            if n > m["E"]:
                continue
            r = rows_per_direction(n, m["E"], m["k"])
            rows.append([m["name"], n, f"{r['kbar']:.3f}", f"{r['masked']:.2f}",
                         f"{r['masked_exact']:.2f}", f"{r['a2a']:.2f}", f"{r['full']:.0f}",
                         f"{r['ring']:.0f}", f"{r['masked'] / r['a2a']:.3f}",
                         f"{r['masked'] / r['full']:.2f}"])
    print(table(["model", "N", "k-bar", "masked (1+k-bar)", "masked, exact", "a2a", "full",
                 "ring", "masked/a2a", "masked/full"], rows))
    if args.leaves is None and args.tree is None:
        return 0
    shape = f"--leaves {args.leaves}" if args.leaves is not None else f"--tree {args.tree}"
    print(f"\nOver the tree ({shape}): rows on the busiest up-link and direction with the same "
          f"collectives, in units of T, and against the busiest rank link (x):\n")
    rows, skipped = [], []
    for name in names:
        m = MODELS[name]
        for n in ns:
            if n > m["E"]:
                continue
            try:
                r = tree_rows(n, m["E"], m["k"], args.leaves, args.tree)
            except ModelError as e:
                skipped.append(f"{m['name']} N={n}: {e}")
                continue
            rows.append([m["name"], n, "+".join(str(x) for x in r["leaves"])] +
                        [f"{r[key][0]:.2f} ({r[key][0] / r[key][1]:.2f}x)"
                         for key in ("masked", "a2a", "full", "ring")])
    print(table(["model", "N", "ranks per leaf", "masked", "a2a", "full", "ring"], rows))
    for line in skipped:
        print(f"\n(not shown: {line})")
    return 0


def tree_rows(N, E, k, leaves, shape):
    """Rows per direction (no bitmaps) of dispatch || combine (masked, a2a) and
    AG || RS (full, ring) of T tokens per rank over a tree, in units of T:
    {path: (busiest up-link and direction, busiest rank link and direction)}
    and the tree's ranks per leaf."""
    ns = argparse.Namespace(model=None, N=N, E=E, k=k, hidden=1, inter=None, tokens=1.0,
                            bytes=None, route="uniform", placement="contiguous", meta=0,
                            leaves=leaves, tree=shape, samples=1, seed=1)
    for f in ("rate", "switch_rate", "switch_burst", "uplink_rate", "uplink_burst", "latency",
              "msg_cost", "switch_msg_cost", "switch_byte_cost", "efficiency", "burst", "chunk",
              "credits", "ffn_gflops", "cores", "band_cost"):
        setattr(ns, f, None)
    p = params_from(ns, "fabric")
    if not p.tree:
        raise ModelError("one switch")
    stats = uniform_stats(N, E, k)
    out = {"leaves": build_tree(p.tree, N).leaf_sizes()}
    for key, op, algo in (("masked", "dc", "inc"), ("a2a", "dc", "a2a"), ("full", "agrs", "inc"),
                          ("ring", "agrs", "ring")):
        t = traffic(op, algo, p, stats)
        up = max(max(ln.up, ln.down) for ln in t.links)
        out[key] = (up / p.row, max(max(t.up), max(t.down)) / p.row)
    return out


def predict_rows(preset, args, name):
    """One model's predictions at N = 8 ... 256: a list of dicts (None where N > E)."""
    m = MODELS[name]
    out = []
    for n in PREDICT_N:
        if n > m["E"]:
            out.append(None)
            continue
        ns = argparse.Namespace(**vars(args))
        ns.model, ns.N, ns.E, ns.k, ns.hidden, ns.inter = name, n, None, None, None, None
        p = params_from(ns, preset)
        stats = route_stats(p)
        t = {key: collective_time(op, algo, p, stats) for key, op, algo in
             (("masked", "dc", "inc"), ("a2a", "dc", "a2a"), ("full", "agrs", "inc"),
              ("ring", "agrs", "ring"))}
        skew = p.replace(route=("zipf", args.skew))
        sstats = route_stats(skew)
        st = {key: collective_time("dc", algo, skew, sstats) for key, algo in
              (("masked", "inc"), ("a2a", "a2a"))}
        today, masked = job_memory(p, p.credits)
        need = line_rate_credits(p)
        need_today, need_masked = job_memory(p, need)
        tm = t["masked"]
        tr = tm.traffic
        port = max(max(tr.up), max(tr.down)) / tm.total * 8
        reduce_in = sum(a for a in stats.rows(p.tokens)[2]) * p.row / tm.total * 8
        out.append({"N": n, "p": p, "kbar": stats.kbar(), "t": t, "skew": st,
                    "crossover": crossover_tokens(p, stats),
                    "mem_today": today, "mem_masked": masked, "need_credits": need,
                    "need_today": need_today, "need_masked": need_masked,
                    "port_bps": port, "reduce_bps": reduce_in,
                    "switch_bps": (tr.sw_in + tr.sw_out) / tm.total * 8,
                    "uplink_bps": tm.uplink_busiest / tm.total * 8})
    return out


def crossover_tokens(p, stats):
    """Fewest tokens per rank from which masked in-network dc beats a2a dc
    (None: not up to 2^20)."""
    def wins(T):
        q = p.replace(tokens=T)
        return (collective_time("dc", "inc", q, stats).total <
                collective_time("dc", "a2a", q, stats).total)
    if not wins(float(1 << 20)):
        return None
    lo, hi = 0, 1 << 20
    if wins(1.0):
        return 1
    lo = 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if wins(float(mid)):
            hi = mid
        else:
            lo = mid
    return hi


def cmd_predict(args, preset):
    pre = PRESETS[preset]
    tree = (f", {args.leaves} leaf switches under a root, up-links at "
            f"{args.uplink_rate or args.rate or pre['rate']}") if args.leaves else ""
    print(f"Predictions, preset {preset}: {args.rate or pre['rate']} per rank link{tree}, "
          f"T={args.tokens:g} tokens per rank, fp32 rows of the model's hidden size, "
          f"route {args.route} (and zipf:{args.skew:g} where marked).\n")
    for name in args.model_list or PREDICT_MODELS:
        m = MODELS[name]
        res = predict_rows(preset, args, name)
        print(f"### {m['name']} (E={m['E']}, k={m['k']}, H={m['H']})\n")
        rows = []
        for r in res:
            if r is None:
                continue
            t, s = r["t"], r["skew"]
            ratio = t["masked"].total / t["a2a"].total
            rows.append([r["N"], f"{r['kbar']:.2f}", f"{t['masked'].total * 1e3:.2f}",
                         f"{t['a2a'].total * 1e3:.2f}", f"{t['full'].total * 1e3:.2f}",
                         f"{t['ring'].total * 1e3:.2f}", f"{ratio:.3f}",
                         f"{(1 - ratio) * 100:.0f}%" if ratio < 1 else "no",
                         f"{t['masked'].total / t['full'].total:.3f}",
                         f"{s['masked'].total / s['a2a'].total:.3f}",
                         r["crossover"] if r["crossover"] is not None else "never"])
        skipped = [str(n) for n, r in zip(PREDICT_N, res) if r is None]
        print(table(["N", "k-bar", "masked ms", "a2a ms", "full ms", "ring ms", "masked/a2a",
                     "masked beats a2a by", "masked/full", f"masked/a2a zipf:{args.skew:g}",
                     "masked wins from T ="], rows))
        if skipped:
            print(f"\n(N = {', '.join(skipped)}: more ranks than experts, not modelled)")
        print()
        rows = []
        for r in res:
            if r is None:
                continue
            rows.append([r["N"], fmt_bytes(r["mem_today"]), fmt_bytes(r["mem_masked"]),
                         r["need_credits"], fmt_bytes(r["need_today"] + r["need_masked"]),
                         fmt_rate(r["port_bps"]), fmt_rate(r["switch_bps"]),
                         fmt_rate(r["reduce_bps"])] +
                        ([fmt_rate(r["uplink_bps"])] if args.leaves else []))
        print(table(["N", "job memory today", "+ masked", "credits line rate needs",
                     "job memory at those credits", "per port, each way",
                     "switches in+out" if args.leaves else "switch in+out", "switch reduces"] +
                    (["busiest up-link, each way"] if args.leaves else []), rows))
        if args.leaves:
            print("\n(job memory: one switch's bound for all N ranks, as without a tree)")
        print()
    return 0
