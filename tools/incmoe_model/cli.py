"""incmoe-model - a cost model of incmoe's collectives and its MoE layer.

  incmoe-model [--preset testbed|fabric] time [--op OP] [--algo ALGO] [OPTIONS]
               [--leaves K | --tree SHAPE] [--uplink-rate RATE]
  incmoe-model rows [--models M1,M2,...] [--ns 4,8,...] [--leaves K | --tree SHAPE]
  incmoe-model [--preset ...] predict [--models ...] [--tokens T] [--route R] [--skew S]
               [--leaves K]
  incmoe-model [--preset ...] check [--tolerance PCT] [--rate RATE] FILE...
  incmoe-model [--preset ...] fit [--rate RATE] FILE...
  incmoe-model [--preset ...] plot -o OUT.png [predict's options]
  incmoe-model decode [--rate RATE]

time     the time of one collective or MoE layer, with the bytes per rank and link
         direction behind it and its bound (max over ranks and directions of
         bytes / link rate, as incmoe-perf reports it).  OP: allgather,
         reducescatter, allreduce, agrs (an AllGather and a ReduceScatter of -b
         bytes each, concurrent), dispatch, combine, dc (dispatch || combine of
         --tokens rows per rank; --form ll: the low-latency form), moe (the
         layer: --mode baseline|pipelined|decode, --routing full|masked).
         ALGO: ring, inc (in-network), a2a.
rows     rows per rank and link direction of the four paths (issue 18's tables);
         with a tree, also those of the busiest up-link.
predict  OLMoE, Qwen3-30B-A3B and DeepSeek-V3 at N = 8 ... 256: dispatch ||
         combine by masked in-network, all-to-all, full in-network and ring, and
         the switch memory and per-port bandwidth the masked path needs.
check    the model against measured points: incmoe-perf outputs (every op,
         dispatch, combine and dc included: their tokens, rows and routing come
         from the output; an output whose '#' lines say low-latency, a
         --low-latency run, is modelled in that form) and incmoe-moe-bench
         outputs (its table and its decode rows, a decode mode's row modelled
         as the decode step; the runs of one setting are taken at their
         median), and points files; exits 1 when a bandwidth-bound point is off
         by more than --tolerance percent (default 10).
fit      the testbed preset's constants from measured outputs (see "Fit").
plot     predict's dispatch || combine times as a PNG (gnuplot).

A points file holds one measured point per line: the options of `time` and
--measured-us US (or --measured-ms MS; without either the point is listed as
"to be measured"), optionally --label TEXT; `#` starts a comment.  E.g.
  --op dc --algo inc -N 8 -E 64 -k 8 --tokens 2048 --hidden 1024 --measured-us 4012345

The model.  Rows are fp32, 4*H bytes.  Per rank and link direction each path
carries, for T tokens per rank (k-bar: the other ranks a token goes to, u: the
rows whose destination set holds another rank, m: the destination bitmap,
8*ceil(N/64) bytes, carried with every masked dispatch row and resent with the
combine):
    ring AG || RS            2(N-1)/N * S        (S = N*T*4H)
    full in-network AG || RS S
    masked in-network dc     (u + k-bar*T) rows (+ m per row up, and down in dispatch)
    all-to-all dc            2 * k-bar * T rows
Time = per-message terms + store-and-forward + max(rank links, switch link,
switch CPU), where a link term is (bytes - burst) / (efficiency * rate) on the
busiest rank and direction.  Per-message terms: the ring pays (N-1) steps per
collective and 2(N-1) for a concurrent pair or an AllReduce, each --latency; an
in-network collective pays two hops (rank -> switch -> rank), and a
store-and-forward switch one chunk time at the start of an AllGather or dispatch
(the first chunk must arrive before a copy leaves) and one at the end of a
ReduceScatter or combine (the last result leaves after the last partial
arrived); the switch handles every message serially (--switch-msg-cost each, and
--switch-byte-cost per byte in or out); an all-to-all pays one hop and
--msg-cost per message it sends to each peer.  Routing statistics: uniform
routing exactly (k-bar = (N-1)(1 - C(E-E/N,k)/C(E,k))); zipf:S by seeded
sampling (--samples tokens, --seed): expert e has popularity (e+1)^-S, a token's
k experts are drawn without replacement in proportion to it, and experts are
placed contiguously (rank r holds experts r*E/N ... (r+1)*E/N - 1, so rank 0
holds the most popular) or, with --placement strided, expert e on rank e % N.
Under skew the busiest rank sets the time.  The MoE
layer: baseline = header + dispatch + FFN + combine; pipelined over nb bands =
header + per-message terms once + A + F + R + (nb-1) * max(P, F) + nb * band
cost, with A, R, P the AllGather/dispatch, ReduceScatter/combine and concurrent
pair of one band and F its FFN (6*H*I flops per routed token and expert on the
busiest rank).

The low-latency form and the decode step (issue 28).  The form (base/wire.h)
sends one message up per rank: in-network the switch forwards each source's
rows to every other rank as that source's message arrives (one message per
source and receiver, none empty-skipped), and a combine's results leave once
every rank's message is in, one down per owner; point to point a rank sends
one message to every other rank.  Each message carries 136 bytes of header
and description, a dispatch its sets (8*ceil(N/64) bytes a token) and 4 bytes
per row forwarded, a combine its sets and N counts.  A loop of decode steps
drains a shaped link's bucket, so every byte is charged at the rate, no burst;
the switch stores and forwards whole messages, so in-network a dispatch or a
combine takes 2 hops + the busiest rank's bytes up + its bytes down (or the
switch's serial work, if longer), dispatch || combine 2 hops + dispatch up +
max(combine up, dispatch down) + combine down; point to point one hop,
--msg-cost per message sent, and the busier direction's bytes.  The decode
step is a low-latency dispatch + the FFN of the busiest rank + a low-latency
combine, in sequence, with no header exchange and no bands; its bound is
incmoe-moe-bench's (the busiest rank's rows on its busier direction at the
link rate both ways, plus the FFN).  The form does not cross switch trees.

Trees (issue 22).  --leaves K puts the N ranks under K leaf switches below one
root, contiguously, the first N % K leaves one more (tools/testbed's rule);
--tree R0xR1x... gives the radix of each switch level from the root down: 4x4
is a root over 4 leaves of 4 ranks, 2x2x4 three levels (N defaults to their
product; a smaller N is spread by the same rule at every level, down to one
rank per leaf).  A rank's link carries what it carries under one switch.  Any
other link, a switch's up-link, parts the m ranks below it from the N - m
beyond and carries per direction (up, down), for a collective of S = N*B:
    AllGather      m*B, (N-m)*B     a block once toward the ranks beyond
    ReduceScatter  (N-m)*B, m*B     a partial once, reduced over the ranks
                                    behind it, toward its owner (the blocks
                                    of the ranks below stay below: the sum
                                    of the others' comes down, and the
                                    owner's leaf adds its own ranks' last)
    AllReduce      S, S             one vector reduced below, one back
    AG || RS       S, S             no more than a rank's link carries
    dispatch       rows owned below with a rank of their set beyond, up; rows
                   owned beyond with a rank of their set below, down (each with
                   its bitmap), from the routing statistics of the m ranks
                   (uniform exactly, zipf by the same samples)
    combine        the reverse, partials reduced below; the owners' resent
                   bitmaps follow their dispatch rows between switches
    ring           the ring edges r -> r+1 (mod N) leaving the m ranks, up, and
                   entering them, down, each a rank's bytes: contiguous ranks
                   give one each way, what a rank's link carries
    all-to-all dc  a row once to each rank of its set beyond: under uniform
                   routing m*(N-m) (owner, rank) pairs each way
    (on a2a the full collectives run as on the ring, as under one switch)
Time over an L-level tree: each level below the root adds a hop each way (2L
hops of --latency), and per added hop a chunk's store-and-forward at the
up-link's rate and one --switch-msg-cost; a one-message collective instead
pays its whole message on each up-link and its switches' work level by level
(each level's busiest switch in turn).  The throughput term is the max over
the rank links, the up-links (--uplink-rate, default --rate; --uplink-burst)
and each switch's own work (each its own process: switches sharing cores, as on
a two-core testbed, are not modelled); a switch's own interfaces are taken as
fast as its links (--switch-rate is one switch's).  Ring and all-to-all
messages are routed by the switches' hosts, no process on the path: their
per-message terms are those of one switch.  time shows every up-link's bytes
and the busiest against the busiest rank link's; check and fit take points
with the tree options.

Fit.  fit takes, in this order: --latency from ring collectives whose bytes fit
the tbf burst (time / steps); --switch-byte-cost from the switch's "stopped: ...
bytes in, ... out, ... cpu" lines; --switch-msg-cost from small in-network
collectives, (time - their hops - the switch's byte work) / their messages
(one switch: 2 hops and 2N messages; a tree: see "Trees")
(--msg-cost is set to it: the ranks are the same kind of process on the same
stack); --efficiency from bandwidth-bound AG || RS points; --ffn-gflops from the
MoE layer's baseline rows (the FFN is the time the collectives leave);
--band-cost from the band counts the layer chose (moe/autotune.c: nb =
sqrt(2 * stage / band cost)).  Each step uses the ones before it; the median
over the points is taken.

Presets.  testbed: tools/testbed on cubic, the constants fitted from
bench/data/targets (BENCHMARKS.md, "The cost model").  fabric: assumptions for
the predictions, not measurements: 100 Gbit/s per rank (the paper's), 3 us per
hop, 0.25 us per message at a host, a switch at line rate.
"""

import argparse
import math
import sys

from .presets import MODELS, ModelError, PREDICT_N, PRESETS, PROG
from .params import add_model_options, add_time_options
from .commands import cmd_predict, cmd_rows, cmd_time
from .measured import cmd_check
from .fit import cmd_fit
from .decode import cmd_decode
from .plot import cmd_plot


def list_arg(text, what, conv=str, choices=None):
    items = [conv(x) for x in text.split(",") if x]
    for x in items:
        if choices and x not in choices:
            raise ModelError(f"{what}: '{x}' is not one of {', '.join(choices)}")
    return items


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--preset", choices=sorted(PRESETS),
                    help="testbed (default), fabric (the default of predict and plot)")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    sp = sub.add_parser("time", help="the time of one collective or MoE layer")
    add_time_options(sp)
    sp = sub.add_parser("rows", help="rows per rank and direction (issue 18's tables)")
    sp.add_argument("--models", dest="models", default="", help="comma list of models")
    sp.add_argument("--ns", default="", help="comma list of N")
    sp.add_argument("--leaves", type=int, metavar="K",
                    help="also the rows on the up-links of K leaves (as time's --leaves)")
    sp.add_argument("--tree", metavar="SHAPE", help="the same over a tree (as time's --tree)")
    for name, helptext in (("predict", "the three models at N = 8 ... 256"),
                           ("plot", "predict's dc times as a PNG")):
        sp = sub.add_parser(name, help=helptext)
        add_model_options(sp)
        sp.add_argument("--models", dest="models", default="", help="comma list of models")
        sp.add_argument("--skew", type=float, default=1.0, help="the zipf S shown beside (1.0)")
        sp.set_defaults(tokens=4096.0)
        if name == "plot":
            sp.add_argument("-o", dest="output", required=True, help="the PNG to write")
    sp = sub.add_parser("decode", help="the decode points (issue 28) beside DeepEP's figures")
    sp.add_argument("--rate", help="the fabric's rank link rate (default: 100gbit and 400gbit)")
    sp = sub.add_parser("check", help="the model against measured points")
    sp.add_argument("--tolerance", type=float, default=10.0, help="percent (default 10)")
    sp.add_argument("--rate", help="link rate of outputs that do not state theirs")
    sp.add_argument("files", nargs="+")
    sp = sub.add_parser("fit", help="the testbed constants from measured outputs")
    sp.add_argument("--rate", help="link rate of outputs that do not state theirs")
    sp.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    if args.command is None:
        ap.print_help()
        return 2
    try:
        if hasattr(args, "models"):
            args.model_list = list_arg(args.models, "--models", choices=sorted(MODELS))
        if args.command == "rows":
            args.n_list = list_arg(args.ns, "--ns", int)
        preset = args.preset or ("fabric" if args.command in ("predict", "plot") else "testbed")
        if args.command in ("predict", "plot") and (args.tree or args.N is not None):
            raise ModelError(f"{args.command} spans N = {', '.join(map(str, PREDICT_N))}: "
                             + ("give its tree as --leaves K, not --tree" if args.tree
                                else "-N is not taken"))
        if args.command == "decode" and args.preset:
            raise ModelError("decode prints the testbed preset's points and the fabric's: "
                             "--preset is not taken (--rate sets the fabric's rate)")
        if getattr(args, "skew", 0.0) < 0 or not math.isfinite(getattr(args, "skew", 0.0)):
            raise ModelError(f"--skew {args.skew:g}: the zipf exponent must be >= 0")
        return {"time": cmd_time, "rows": cmd_rows, "predict": cmd_predict, "plot": cmd_plot,
                "check": cmd_check, "fit": cmd_fit, "decode": cmd_decode}[args.command](args,
                                                                                     preset)
    except ModelError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
