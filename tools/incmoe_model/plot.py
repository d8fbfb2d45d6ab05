"""The command plot: predict's dispatch || combine times as a PNG (gnuplot)."""

import os
import shutil
import subprocess
import tempfile

from .presets import MODELS, ModelError, PREDICT_MODELS, PRESETS
from .units import fmt_rate, parse_rate
from .commands import predict_rows


def cmd_plot(args, preset):
    if shutil.which("gnuplot") is None:
        raise ModelError("gnuplot not found: apt-get install gnuplot-nox")
    names = args.model_list or PREDICT_MODELS
    work = tempfile.mkdtemp(prefix="incmoe-model.")
    try:
        script = [f"set terminal pngcairo noenhanced size {640 * len(names)},560 font ',11'",
                  f"set output '{args.output}'", f"set multiplot layout 1,{len(names)}",
                  "set logscale x 2", "set xlabel 'ranks N'", "set logscale y 2",
                  "set ylabel 'dispatch || combine time / all-to-all (log scale)'",
                  "set yrange [0.25:*]", "set grid",
                  "set key outside below horizontal maxcols 2 width 2"]
        for i, name in enumerate(names):
            dat = os.path.join(work, f"{i}.dat")
            with open(dat, "w") as f:
                for r in predict_rows(preset, args, name):
                    if r is None:
                        continue
                    a2a = r["t"]["a2a"].total
                    f.write(f"{r['N']} {r['t']['masked'].total / a2a:.6f} "
                            f"{r['t']['full'].total / a2a:.6f} {r['t']['ring'].total / a2a:.6f} "
                            f"{r['skew']['masked'].total / r['skew']['a2a'].total:.6f}\n")
            m = MODELS[name]
            rate = fmt_rate(parse_rate(args.rate or PRESETS[preset]["rate"]))
            script.append(f"set title '{m['name']} (E={m['E']}, k={m['k']}), "
                          f"{args.tokens:g} tokens/rank, {rate} per rank'")
            style = "with linespoints linewidth 2 pointsize 1.3"
            script.append(
                f"plot '{dat}' using 1:2 title 'masked in-network' {style}, "
                f"'{dat}' using 1:3 title 'full in-network AG || RS' {style}, "
                f"'{dat}' using 1:4 title 'ring AG || RS' {style}, "
                f"1 title 'all-to-all' with lines dashtype 2 linewidth 2, "
                f"'{dat}' using 1:5 title 'masked / a2a, both zipf:{args.skew:g}' {style} "
                f"dashtype 3 linecolor rgb 'dark-red'")
        script.append("unset multiplot")
        gp = os.path.join(work, "plot.gp")
        with open(gp, "w") as f:
            f.write("\n".join(script) + "\n")
        subprocess.run(["gnuplot", gp], check=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {args.output}")
    return 0
