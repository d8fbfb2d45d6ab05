"""Tests of tools/incmoe-model's low-latency form and decode step (issue 28): the bytes of
each message and the times against values computed by hand from base/wire.h's messages, the
decode command's published figures and labels, and check reading measured decode points
(an incmoe-perf --low-latency output, incmoe-moe-bench's decode rows, the points file).

Run by `tools/quickstart test` (and alone: python3 -m pytest tests/model).
"""

import os

import pytest

from model_tool import TOP, load_tool

m = load_tool()

# A point whose routing and costs are easy by hand: N=2, E=2, k=1 (each token picks one of
# two experts, one per rank: half the tokens stay home), T=4 rows of 64 B (hidden 16), a link
# of 1e6 B/s, 1 ms a hop, 0.1 ms a message sent point to point, a switch that costs nothing,
# an FFN at 1 GFLOP/s per rank.
HAND = ["-N", "2", "-E", "2", "-k", "1", "--tokens", "4", "--hidden", "16", "--inter", "8",
        "--rate", "8mbit", "--efficiency", "1", "--burst", "0", "--latency", "1000",
        "--msg-cost", "100", "--switch-msg-cost", "0", "--switch-byte-cost", "0",
        "--ffn-gflops", "1", "--cores", "0"]


def params(argv, preset="testbed"):
    ap = m.PointParser(prog="t", add_help=False)
    m.add_time_options(ap)
    return m.params_from(ap.parse_args(list(argv)), preset)


def hand_point(*more):
    p = params(HAND + list(more))
    return p, m.route_stats(p)


# Per rank: u = 2 rows leave (their expert is the other rank's), the other rank's 2 arrive;
# a message carries 72 + 64 bytes of header and description; the sets are 4 tokens x 8 B.
INC_BYTES = {"up_d": 136 + 32 + 2 * 64,         # LL: sets, the 2 network rows
             "down_d": 136 + 4 * 2 + 2 * 64,    # one LL_FWD: 2 source rows, 2 rows
             "up_c": 136 + 32 + 8 + 2 * 64,     # LL: sets, recvd[2] padded to 8, 2 partials
             "down_c": 136 + 2 * 64}            # LL_FWD: the 2 reduced rows
A2A_BYTES = {"up_d": 136 + 4 * 2 + 2 * 64, "down_d": 136 + 4 * 2 + 2 * 64,
             "up_c": 136 + 2 * 64, "down_c": 136 + 2 * 64}


@pytest.mark.parametrize("algo,want", [("inc", INC_BYTES), ("a2a", A2A_BYTES)])
def test_low_latency_bytes_follow_the_wire_messages(algo, want):
    p, stats = hand_point()
    tr = m.ll_traffic(algo, p, stats)
    for key, value in want.items():
        assert getattr(tr, key) == pytest.approx([value, value]), key


def test_in_network_times_store_and_forward_each_message():
    p, stats = hand_point()
    ms = {op: m.ll_time(op, "inc", p, stats).total * 1e3 for op in ("dispatch", "combine", "dc")}
    # 2 hops of 1 ms, then the bytes up and down in sequence at 1e6 B/s.
    assert ms["dispatch"] == pytest.approx(2 + (296 + 272) / 1e3)
    assert ms["combine"] == pytest.approx(2 + (304 + 264) / 1e3)
    # dc: dispatch up, then the combine up beside the dispatch's forwards down, then the
    # combine's result down.
    assert ms["dc"] == pytest.approx(2 + (296 + max(304, 272) + 264) / 1e3)
    dc = m.ll_time("dc", "inc", p, stats)
    assert dc.bound * 1e3 == pytest.approx(max(296 + 304, 272 + 264) / 1e3)
    assert dc.bandwidth_bound is False  # 0.86 ms of links against 2 ms of hops


def test_a_slow_switch_sets_the_in_network_time():
    # 1 ms a message: a dispatch is N LLs in and N (N - 1) forwards out, 4 messages.
    p, stats = hand_point("--switch-msg-cost", "1000")
    t = m.ll_time("dispatch", "inc", p, stats)
    assert t.switch * 1e3 == pytest.approx(4.0)
    assert t.total * 1e3 == pytest.approx(2 + 4.0)


def test_a_message_over_the_jobs_credits_is_refused_by_the_form():
    # Chunks of 64 B: the in-network combine's LL (304 B) takes 5 credits, its dispatch's
    # (296 B) 5; a point-to-point message to the one peer 272 B (dispatch), 264 B (combine).
    p, stats = hand_point("--chunk", "64", "--credits", "5")
    for op, algo, credits in (("dispatch", "inc", 5), ("combine", "inc", 5), ("dc", "inc", 5),
                              ("dispatch", "a2a", 5), ("combine", "a2a", 5)):
        t = m.ll_time(op, algo, p, stats)
        assert (t.credits, t.fits) == (credits, True), (op, algo)
    p, stats = hand_point("--chunk", "64", "--credits", "4")
    assert not m.ll_time("combine", "inc", p, stats).fits
    p, stats = hand_point("--chunk", "100")
    assert m.ll_time("dispatch", "inc", p, stats).credits == 3  # ceil(296 / 100)


def test_point_to_point_streams_and_pays_per_message():
    p, stats = hand_point()
    # One hop, one message to the other rank, the busier direction at the rate.
    d = m.ll_time("dispatch", "a2a", p, stats)
    assert d.total * 1e3 == pytest.approx(1 + 272 / 1e3)
    # dc sends two messages: one more --msg-cost; both collectives' bytes share the links.
    dc = m.ll_time("dc", "a2a", p, stats)
    assert dc.total * 1e3 == pytest.approx(1 + 0.1 + (272 + 264) / 1e3)
    assert m.ll_time("dc", "ring", p, stats).total == dc.total  # the ring's form is the same


def test_the_decode_step_is_dispatch_ffn_combine_in_sequence():
    p, stats = hand_point()
    r = m.decode_time(p, "inc")
    # FFN: N T k/E... the busiest rank runs 2 ranks x 4 tokens x 1/2 = 4 (token, expert) pairs
    # of 6 x 16 x 8 flops at 1e9 flop/s.
    ffn = 4 * 6 * 16 * 8 / 1e9
    assert r["ffn"] == pytest.approx(ffn)
    assert r["total"] == pytest.approx((2 + 0.568) * 1e-3 + ffn + (2 + 0.568) * 1e-3)
    # The bound: 2 rows on the busier direction, 64 B out and 64 B back, plus the FFN.
    assert r["bound"] == pytest.approx(2 * 128 / 1e6 + ffn)
    assert m.moe_time(p, "decode", "inc", "full")["total"] == r["total"]


def test_the_low_latency_form_has_no_tree_and_no_full_collectives():
    p = params(["-N", "4", "--leaves", "2"])
    with pytest.raises(m.ModelError, match="does not cross a switch tree"):
        m.ll_time("dc", "inc", p, m.route_stats(p))
    p = params(["-N", "4"])
    with pytest.raises(m.ModelError, match="dispatch, combine or dc"):
        m.ll_time("agrs", "inc", p, m.route_stats(p))


def test_one_rank_moves_nothing():
    p = params(["-N", "1", "--tokens", "8"])
    assert m.ll_time("dc", "inc", p, m.route_stats(p)).total == 0.0


def test_time_prints_the_low_latency_form_and_the_decode_step(capsys):
    assert m.main(["time", "--op", "dc", "--form", "ll"] + HAND) == 0
    out = capsys.readouterr().out
    assert "dc algo inc, low-latency form" in out and "time 2.864 ms" in out
    assert m.main(["time", "--op", "moe", "--mode", "decode", "--algo", "a2a"] + HAND) == 0
    out = capsys.readouterr().out
    assert "moe decode algo a2a" in out and "FFN 3.1 us" in out


def fabric_table(out, rate_text):
    """The rows of the decode command's fabric table at one rate: {EP: cells}."""
    part = out.split(f"preset fabric at {rate_text} per rank link")[1].split("\n\n", 2)[1]
    lines = [x for x in part.splitlines() if x.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for x in lines[2:]:
        cells = [c.strip() for c in x.strip("|").split("|")]
        rows[int(cells[0])] = dict(zip(header, cells))
    return header, rows


def test_decode_prints_deepeps_published_figures_beside_labelled_predictions(capsys):
    assert m.main(["decode"]) == 0
    out = capsys.readouterr().out
    assert "docs/legacy.md" in out
    for rate in ("100 Gbit/s", "400 Gbit/s"):
        header, rows = fabric_table(out, rate)
        assert sorted(rows) == m.PREDICT_N
        # Every figure but the routing's k-bar and DeepEP's is model output, and says so.
        for name in header:
            assert name in ("EP", "k-bar") or name.startswith(("model ", "DeepEP ")), name
        for n, (d_us, c_us) in m.DEEPEP_LL_US.items():
            assert rows[n]["DeepEP dispatch"] == str(d_us)
            assert rows[n]["DeepEP combine"] == str(c_us)
    # DeepEP's README (docs/legacy.md, "Low-latency kernels with pure RDMA"), as quoted.
    assert m.DEEPEP_LL_US == {8: (77, 114), 16: (118, 195), 32: (155, 273), 64: (173, 314),
                              128: (192, 369), 256: (194, 360)}


def test_decode_fabric_predictions_are_the_models_at_deepeps_setting(capsys):
    assert m.main(["decode", "--rate", "400gbit"]) == 0
    _, rows = fabric_table(capsys.readouterr().out, "400 Gbit/s")
    s = m.DEEPEP_SETTING
    assert s["dispatch_row"] == 7168 + 56 * 4 and s["combine_row"] == 2 * 7168
    p = params(["--model", "deepseek-v3", "-N", "64", "--tokens", "128", "--rate", "400gbit"],
               preset="fabric")
    t = m.ll_time("combine", "inc", p, m.route_stats(p), s["dispatch_row"], s["combine_row"])
    assert rows[64]["model inc combine"] == f"{t.total * 1e6:.0f}"


def test_decode_takes_no_preset(capsys):
    assert m.main(["--preset", "fabric", "decode"]) == 2
    assert "--preset is not taken" in capsys.readouterr().err


# --- check: measured decode points --------------------------------------------------

PERF_LL = """# incmoe-perf: op dc, algo inc, nranks 4, iters 5, warmup 1, check 1
# dc: the dispatch of step i in flight with the combine of step i-1, per step; low-latency form
# tokens 4, hidden 512, row 2048 B, E 64, k 8, route uniform, placement contiguous, seed 1
# link 100 Mbit/s per direction; bound = the busiest rank and direction's bytes / link rate
#
#       size        count     type  redop        time    algbw    busbw   #wrong   rows-out
        8192         2048    float    sum      3500.0   0.0023   0.0087        0         22
"""

MOE_DECODE = """incmoe-moe-bench: N=4 E=64 k=8 H=512 I=256 float, cpu backend, route uniform (experts placed contiguously), median of 5 forwards (slowest rank)
tok/rank algo  routing          base_ms    pipe_ms    auto_ms  base_tok/s  pipe_tok/s pipe/base vs_ring_b  k-bar  ideal_ms pipe/ideal    min_cos   ref_err  pipelined config
decode rows: one layer forward against its bound
link 100 Mbit/s per direction (--link-mbps)
decode tok/rank algo  routing       mode              ms   rows    ffn_ms   bound_ms  t/bound
decode        4 inc   masked        baseline      12.000     11     0.100      3.700     3.24
decode        4 inc   masked        decode         6.000     11     0.100      3.700     1.62
decode        4 a2a   masked        decode         5.000     11     0.100      3.700     1.35
"""


def shown(seconds):
    """A time as check prints it: ms from 10 ms, else us."""
    return f"{seconds * 1e3:.1f} ms" if seconds >= 1e-2 else f"{seconds * 1e6:.1f} us"


def check_rows(tmp_path, capsys, name, text, *extra):
    f = tmp_path / name
    f.write_text(text)
    m.main(["check", *extra, str(f)])
    out = capsys.readouterr().out
    return [[c.strip() for c in x.strip("|").split("|")] for x in out.splitlines()
            if x.startswith("| ") and not x.startswith("| point")]


def test_check_models_a_low_latency_perf_output_in_that_form(tmp_path, capsys):
    rows = check_rows(tmp_path, capsys, "ll.txt", PERF_LL)
    assert len(rows) == 1 and "low-latency" in rows[0][0], rows
    p = params(["-N", "4", "--tokens", "4", "--hidden", "512", "--rate", "100mbit"])
    want = m.ll_time("dc", "inc", p, m.route_stats(p)).total
    assert rows[0][2] == shown(want)
    assert rows[0][4] == shown(3.5e-3) + " (1)"
    # Without the marker the same output is today's form, a different model.
    rows = check_rows(tmp_path, capsys, "bulk.txt", PERF_LL.replace("; low-latency form", ""))
    assert "low-latency" not in rows[0][0] and rows[0][2] != shown(want)


def test_check_reads_the_decode_mode_rows_of_moe_bench_by_their_header(tmp_path, capsys):
    rows = check_rows(tmp_path, capsys, "moe.txt", MOE_DECODE, "--rate", "100mbit")
    got = {r[0]: r for r in rows}
    assert sorted(got) == ["moe decode a2a N=4 @100mbit E=64 k=8 T=4",
                           "moe decode inc N=4 @100mbit E=64 k=8 T=4"], rows
    p = params(["-N", "4", "--tokens", "4", "--hidden", "512", "--inter", "256", "--rate",
                "100mbit"])
    for algo, measured in (("inc", 6.0), ("a2a", 5.0)):
        r = got[f"moe decode {algo} N=4 @100mbit E=64 k=8 T=4"]
        r_model = m.decode_time(p, algo)
        want = r_model["total"]
        assert r[2] == shown(want) and r[4] == shown(measured * 1e-3) + " (1)"
        assert r[3] == f"{want / r_model['bound']:.3f}"  # model / the decode bound
        assert r[5] == f"{(want - measured * 1e-3) / (measured * 1e-3) * 100:+.1f}%"


def test_check_refuses_decode_rows_without_their_columns(tmp_path, capsys):
    f = tmp_path / "bad.txt"
    f.write_text(MOE_DECODE.replace(" mode ", " form "))
    assert m.main(["check", "--rate", "100mbit", str(f)]) == 2
    assert "decode rows' header without mode" in capsys.readouterr().err


def test_the_issue_28_points_file_lists_every_decode_target(capsys):
    path = os.path.join(TOP, "bench", "data", "model", "issue28-decode.points")
    assert m.main(["check", "--tolerance", "25", path]) in (0, 1)
    out = capsys.readouterr().out
    for label in ("dc ll inc, N=4", "dc ll a2a, N=4", "dc ll inc, N=8", "dc ll a2a, N=8",
                  "decode inc, N=4, T=4", "decode a2a, N=4, T=4", "decode inc, N=8, T=4",
                  "decode a2a, N=8, T=4"):
        assert f"| {label} |" in out, label
