"""Tests of tools/incmoe-model: the routing statistics against brute-force
enumeration, issue 18's tables, the paper's bounds, the fit against the
measured points in bench/data, points files and bad input.

Run by `tools/quickstart test` (and alone: python3 -m pytest tests/model).
"""

import itertools
import math
import os
import shutil
import subprocess

import pytest

from model_tool import TOOL, TOP, check_targets_file, load_tool

TARGETS = os.path.join(TOP, "bench", "data", "targets")

m = load_tool()


def params(preset="testbed", argv=()):
    """Params as `time` would build them from argv."""
    ap = m.PointParser(prog="t", add_help=False)
    m.add_time_options(ap)
    return m.params_from(ap.parse_args(list(argv)), preset)


def measured_files():
    """The final code's testbed outputs BENCHMARKS.md reports."""
    names = []
    for sub, keep in (("eqbw-final", ""), ("chunk", ""), ("latency", "-final-"),
                      ("moe", "calibrated-")):
        d = os.path.join(TARGETS, sub)
        names += sorted(os.path.join(d, f) for f in os.listdir(d) if keep in f)
    return names


# --- issue 18's tables -----------------------------------------------------------

# Full AllGather bytes over routing's bytes, (N-1)/k-bar, as printed in the issue.
ISSUE_TABLE_1 = {
    (8, 2): {4: "2.15", 8: "4.00"},
    (64, 8): {4: "1.09", 8: "1.47", 16: "2.37", 32: "4.24", 64: "8.00"},
    (128, 8): {4: "1.10", 8: "1.50", 16: "2.43", 32: "4.35", 64: "8.23"},
    (256, 8): {4: "1.11", 8: "1.51", 16: "2.45", 32: "4.40", 64: "8.34"},
}


def test_full_allgather_overhead_reproduces_the_issues_first_table():
    for (E, k), row in ISSUE_TABLE_1.items():
        for N, text in row.items():
            assert f"{(N - 1) / m.kbar_uniform(N, E, k):.2f}" == text, (E, k, N)


def test_rows_command_prints_the_first_table_with_dashes_where_n_exceeds_e(capsys):
    assert m.main(["rows"]) == 0
    out = capsys.readouterr().out
    assert "| Mixtral-8x7B (8, 2) | 2.15 | 4.00 | – | – | – |" in out
    assert "| OLMoE-1B-7B (64, 8) | 1.09 | 1.47 | 2.37 | 4.24 | 8.00 |" in out
    assert "| Qwen3-30B-A3B (128, 8) | 1.10 | 1.50 | 2.43 | 4.35 | 8.23 |" in out
    assert "| DeepSeek-V3 (256, 8) | 1.11 | 1.51 | 2.45 | 4.40 | 8.34 |" in out


# Rows per rank and direction in units of T: masked, a2a, full, ring.
ISSUE_TABLE_2 = {
    (64, 8, 8): ("5.75", "9.51", "8", "14"),
    (64, 8, 16): ("7.33", "12.66", "16", "30"),
    (8, 2, 4): ("2.39", "2.79", "4", "6"),
    (8, 2, 8): ("2.75", "3.50", "8", "14"),
}


def test_rows_per_direction_reproduce_the_issues_second_table():
    for (E, k, N), (masked, a2a, full, ring) in ISSUE_TABLE_2.items():
        r = m.rows_per_direction(N, E, k)
        assert f"{r['masked']:.2f}" == masked
        assert f"{r['a2a']:.2f}" == a2a
        assert f"{r['full']:.0f}" == full
        assert f"{r['ring']:.0f}" == ring
    olmoe8, olmoe16 = m.rows_per_direction(8, 64, 8), m.rows_per_direction(16, 64, 8)
    assert f"{olmoe8['masked'] / olmoe8['a2a']:.3f}" == "0.605"
    assert f"{olmoe16['masked'] / olmoe16['a2a']:.3f}" == "0.579"
    assert f"{olmoe8['masked'] / olmoe8['full']:.2f}" == "0.72"
    assert f"{olmoe16['masked'] / olmoe16['full']:.2f}" == "0.46"


def test_a_token_whose_experts_are_all_its_owners_never_leaves():
    # Mixtral at N=4: 2 experts per rank, so 1 token in C(8,2) = 28 stays home;
    # the issue's 2.39 counts every token on the up link.
    r = m.rows_per_direction(4, 8, 2)
    assert r["masked"] - r["masked_exact"] == pytest.approx(1 / 28)
    # With fewer experts per rank than k no token can stay home.
    r = m.rows_per_direction(8, 8, 2)
    assert r["masked"] == r["masked_exact"]


def test_need_probabilities_match_design_and_paper():
    # DESIGN.md: a rank needs an OLMoE token with probability 0.92, 0.68, 0.42, 0.24
    # (the first is 0.9147, which DESIGN.md rounds up).
    for N, text in ((4, "0.915"), (8, "0.679"), (16, "0.422"), (32, "0.236")):
        assert f"{m.uniform_stats(N, 64, 8).q[0]:.3f}" == text
    # The paper, section 2.2: 8.5% for E=64 k=8 N=4, 2.74 of 3 remote ranks.
    assert f"{1 - m.uniform_stats(4, 64, 8).q[0]:.3f}" == "0.085"
    assert f"{m.kbar_uniform(4, 64, 8):.2f}" == "2.74"


# --- routing statistics against enumeration ----------------------------------------


def brute_force_uniform(N, E, k):
    owner = m.expert_owner(N, E)
    sets = list(itertools.combinations(range(E), k))
    q, only, share = [0.0] * N, [0.0] * N, [0.0] * N
    for s in sets:
        ranks = {owner[e] for e in s}
        for r in ranks:
            q[r] += 1 / len(sets)
        if len(ranks) == 1:
            only[ranks.pop()] += 1 / len(sets)
        for e in s:
            share[owner[e]] += 1 / len(sets)
    return q, only, share


@pytest.mark.parametrize("N,E,k", [(4, 8, 2), (3, 8, 3), (4, 10, 4), (5, 5, 2), (1, 6, 3)])
def test_uniform_statistics_equal_enumeration_of_every_expert_set(N, E, k):
    st = m.uniform_stats(N, E, k)
    q, only, share = brute_force_uniform(N, E, k)
    assert st.q == pytest.approx(q)
    assert st.only == pytest.approx(only)
    assert st.share == pytest.approx(share)


def successive_sampling_exact(E, k, weights):
    """P(set) of k draws without replacement in proportion to weights, by
    enumerating every order of draws."""
    prob = {}
    for order in itertools.permutations(range(E), k):
        p, left = 1.0, sum(weights)
        for e in order:
            p *= weights[e] / left
            left -= weights[e]
        key = frozenset(order)
        prob[key] = prob.get(key, 0.0) + p
    return prob


def test_zipf_sampling_matches_exact_successive_sampling():
    E, k, S, N, M = 6, 3, 1.0, 3, 40000
    exact = successive_sampling_exact(E, k, [(e + 1) ** -S for e in range(E)])
    owner = m.expert_owner(N, E)
    q = [sum(p for s, p in exact.items() if any(owner[e] == r for e in s)) for r in range(N)]
    st = m.sampled_stats(N, E, k, S, M, seed=7)
    for r in range(N):
        sigma = math.sqrt(q[r] * (1 - q[r]) / M)
        assert abs(st.q[r] - q[r]) < 5 * sigma + 1e-9, (r, st.q[r], q[r])
    # the most popular experts sit on rank 0
    assert st.q[0] > st.q[1] > st.q[2]


def test_strong_skew_with_k_near_e_samples_exactly_and_ends():
    # The chosen experts hold nearly all the weight: the sampler draws among the rest.
    E, k, S, N, M = 5, 4, 6.0, 5, 20000
    exact = successive_sampling_exact(E, k, [(e + 1) ** -S for e in range(E)])
    owner = m.expert_owner(N, E)
    st = m.sampled_stats(N, E, k, S, M, seed=5)
    for r in range(N):
        q = sum(p for s, p in exact.items() if any(owner[e] == r for e in s))
        assert abs(st.q[r] - q) < 5 * math.sqrt(q * (1 - q) / M) + 1e-9, (r, st.q[r], q)


def test_strided_placement_spreads_the_popular_experts():
    st = m.sampled_stats(8, 64, 8, 1.0, 20000, seed=2, placement="strided")
    owner = m.expert_owner(8, 64, "strided")
    assert owner[:9] == [0, 1, 2, 3, 4, 5, 6, 7, 0]
    contiguous = m.sampled_stats(8, 64, 8, 1.0, 20000, seed=2)
    assert max(st.q) < max(contiguous.q)
    # uniform routing does not care where the experts are
    assert m.uniform_stats(8, 64, 8, "strided").q == pytest.approx(m.uniform_stats(8, 64, 8).q)


def test_zipf_of_zero_is_uniform_within_sampling_error():
    exact = m.uniform_stats(8, 64, 8)
    st = m.sampled_stats(8, 64, 8, 0.0, 20000, seed=3)
    for r in range(8):
        sigma = math.sqrt(exact.q[r] * (1 - exact.q[r]) / 20000)
        assert abs(st.q[r] - exact.q[r]) < 5 * sigma
    assert st.kbar() == pytest.approx(exact.kbar(), rel=0.01)


def test_sampling_is_seeded():
    a = m.sampled_stats(8, 64, 8, 1.0, 5000, seed=11)
    b = m.sampled_stats(8, 64, 8, 1.0, 5000, seed=11)
    c = m.sampled_stats(8, 64, 8, 1.0, 5000, seed=12)
    assert a.q == b.q and a.q != c.q


# --- bytes, bounds and the paper's ratios ---------------------------------------------


def test_masked_and_a2a_bytes_per_direction_follow_their_formulas():
    p = params(argv=["-N", "8", "-E", "64", "-k", "8", "--tokens", "2048", "--hidden", "1024",
                     "--meta", "0"])
    st = m.uniform_stats(8, 64, 8)
    kb, T, row = st.kbar(), 2048, 4096
    stay = st.only[0]
    inc = m.traffic("dc", "inc", p, st)
    a2a = m.traffic("dc", "a2a", p, st)
    for r in range(8):
        assert inc.up[r] == pytest.approx(((1 - stay) + kb) * T * row)
        assert inc.down[r] == pytest.approx(((1 - stay) + kb) * T * row)
        assert a2a.up[r] == pytest.approx(2 * kb * T * row)
        assert a2a.down[r] == pytest.approx(2 * kb * T * row)
    # the bitmap adds m bytes per row that crosses a link in the dispatch, and
    # per owner row in the combine's resend
    pm = p.replace(meta=8)
    incm = m.traffic("dc", "inc", pm, st)
    assert incm.up[0] - inc.up[0] == pytest.approx(8 * 2 * (1 - stay) * T)
    assert incm.down[0] - inc.down[0] == pytest.approx(8 * kb * T)


def test_bitmap_is_one_word_per_64_ranks():
    assert params(argv=["-N", "8"]).meta_bytes == 8
    assert params(argv=["-N", "64"]).meta_bytes == 8
    assert params(argv=["-N", "65", "-E", "130"]).meta_bytes == 16
    assert params(argv=["-N", "256", "-E", "256"]).meta_bytes == 32


@pytest.mark.parametrize("N", [2, 4, 8, 16, 256])
def test_bandwidth_bound_pair_times_follow_the_papers_equation_4(N):
    # No per-message terms, no store-and-forward: the ratio is 2(N-1)/N.
    argv = ["-N", str(N), "-b", "1G", "--latency", "0", "--switch-msg-cost", "0",
            "--chunk", "64"]
    p = params("fabric", argv)
    ring = m.collective_time("agrs", "ring", p)
    inc = m.collective_time("agrs", "inc", p)
    assert inc.rank_link == pytest.approx(2**30 / (p.rate_bps / 8))
    assert ring.rank_link / inc.rank_link == pytest.approx(2 * (N - 1) / N)


def test_each_in_network_collective_alone_takes_the_rings_bandwidth_time():
    p = params("fabric", ["-N", "8", "-b", "512M"])
    for op in ("allgather", "reducescatter"):
        assert (m.collective_time(op, "inc", p).rank_link ==
                pytest.approx(m.collective_time(op, "ring", p).rank_link))


def test_store_and_forward_costs_two_chunk_times_per_pair():
    base = ["-N", "8", "-b", "64M", "--latency", "0"]
    small = m.collective_time("agrs", "inc", params(argv=base + ["--chunk", "64K"]))
    large = m.collective_time("agrs", "inc", params(argv=base + ["--chunk", "256K"]))
    eff = params(argv=base).efficiency * 100e6 / 8
    assert large.sf - small.sf == pytest.approx(2 * (256 - 64) * 1024 / eff)


def test_skew_makes_the_busiest_rank_set_the_time():
    p = params(argv=["-N", "8", "-E", "64", "-k", "8", "--route", "zipf:1.0",
                     "--samples", "20000"])
    st = m.route_stats(p)
    t = m.collective_time("dc", "inc", p, st)
    tr = t.traffic
    busiest = max(max(tr.up), max(tr.down))
    assert t.bound == pytest.approx(busiest / (p.rate_bps / 8))
    assert max(range(8), key=lambda r: tr.down[r]) == 0  # rank 0 holds the popular experts
    assert tr.down[0] > 1.2 * sum(tr.down) / 8


def test_masked_beats_a2a_and_full_in_bytes_for_every_predicted_model():
    for name in m.PREDICT_MODELS:
        E, k = m.MODELS[name]["E"], m.MODELS[name]["k"]
        for N in m.PREDICT_N:
            if N > E:
                continue
            r = m.rows_per_direction(N, E, k)
            assert r["masked_exact"] < r["a2a"] and r["masked_exact"] <= r["full"]


def test_one_rank_moves_nothing():
    p = params(argv=["-N", "1"])
    for op, algo in (("dc", "inc"), ("dc", "a2a"), ("agrs", "inc"), ("agrs", "ring")):
        assert m.collective_time(op, algo, p).total == 0.0, (op, algo)


def test_small_in_network_collectives_take_one_message_each_way():
    p = params(argv=["-N", "8", "-b", "4096"])
    t = m.traffic("allgather", "inc", p)
    assert t.small and t.sw_msgs == 16
    assert not m.traffic("allgather", "inc", params(argv=["-N", "8", "-b", "65537"])).small
    # a small AllGather and a small ReduceScatter posted together: four messages per rank
    assert m.traffic("agrs", "inc", params(argv=["-N", "8", "-b", "4096"])).sw_msgs == 32


def test_testbed_burst_is_tools_testbeds_default():
    for bps in (50_000_000, 100_000_000, 200_000_000, 1_000_000_000, 800_000_000):
        out = subprocess.run(
            ["bash", "-c", f'. "{os.path.join(TOP, "tools", "testbed")}"; '
             f"default_burst {bps} 9000"], capture_output=True, text=True, check=True).stdout
        assert m.testbed_burst(bps) == int(out)


# --- the switch ----------------------------------------------------------------------


def test_job_memory_today_is_readmes_formula():
    # credits x ((chunk + 8N) x 3N + 6 x chunk): N=8, 128 KiB, 64 credits
    today, masked = m.job_memory(params(argv=["-N", "8"]), 64)
    assert today == 64 * ((131072 + 64) * 24 + 6 * 131072) == 251756544
    assert masked == 64 * ((131072 + 64) * 16 + 2 * 131072)
    # at N=256 a job outgrows the switch's default --max-memory of 4 GiB
    today, _ = m.job_memory(params(argv=["-N", "256", "-E", "256"]), 64)
    assert today > 4 << 30


def test_line_rate_needs_a_bandwidth_delay_product_of_credits():
    p = params("fabric", ["-N", "8"])
    need = m.line_rate_credits(p)
    window = need * p.chunk
    rtt = 2 * p.latency_s + 2 * p.chunk / (p.rate_bps / 8)
    assert window >= rtt * p.rate_bps / 8
    assert (need - 2) * p.chunk < rtt * p.rate_bps / 8


# --- the MoE layer ---------------------------------------------------------------------

LAYER = ["-N", "8", "-E", "64", "-k", "8", "--hidden", "512", "--inter", "256",
         "--tokens", "1024"]


def test_moe_baseline_is_its_parts_in_sequence():
    p = params(argv=LAYER)
    st = m.route_stats(p)
    r = m.moe_time(p, "baseline", "a2a", "masked")
    d = m.collective_time("dispatch", "a2a", p, st).total
    c = m.collective_time("combine", "a2a", p, st).total
    assert r["total"] == pytest.approx(m.header_time("a2a", p) + d + m.ffn_time(p, st) + c)


def test_moe_pipeline_approaches_the_slower_of_links_and_ffn():
    # many bands without fixed costs: the pair's bandwidth time or the FFN
    for gflops in (1.0, 1e6):
        p = params(argv=LAYER + ["--band-cost", "0", "--ffn-gflops", str(gflops)])
        st = m.route_stats(p)
        pair = m.collective_time("dc", "inc", p.replace(burst=0, switch_burst=0), st)
        ffn = m.ffn_time(p, st)
        r = m.moe_time(p, "pipelined", "inc", "masked", bands=1024)
        assert r["total"] == pytest.approx(max(pair.throughput, ffn), rel=0.03)


def test_moe_targets_of_issue_18_are_predicted_met():
    p = params(argv=LAYER)
    masked = m.moe_time(p, "pipelined", "inc", "masked")["total"]
    assert masked / m.moe_time(p, "baseline", "a2a", "masked")["total"] <= 0.65
    assert masked / m.moe_time(p, "pipelined", "inc", "full")["total"] <= 0.85


def test_ffn_counts_six_h_i_flops_per_routed_pair():
    p = params(argv=LAYER + ["--cores", "0", "--ffn-gflops", "1"])
    assert m.ffn_time(p, m.route_stats(p)) == pytest.approx(8 * 1024 * 8 * 6 * 512 * 256 / 8 /
                                                            1e9)


def test_auto_bands_follow_the_layers_rule():
    p = params(argv=LAYER + ["--band-cost", "0"])
    st = m.route_stats(p)
    assert m.auto_bands(p, "inc", "full", st, m.ffn_time(p, st)) == 8
    p = params(argv=LAYER + ["--band-cost", "1e9"])
    assert m.auto_bands(p, "inc", "full", st, m.ffn_time(p, st)) == 1
    p = params(argv=LAYER + ["--tokens", "16", "--band-cost", "1"])
    assert m.auto_bands(p, "inc", "full", st, m.ffn_time(p, st)) == 2  # rows of 8 at least


# --- calibration against the testbed ------------------------------------------------------


def test_check_of_the_measured_points_holds_every_bandwidth_bound_point(capsys):
    rc = m.main(["check", "--rate", "100mbit"] + measured_files())
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = [r.split("|")[1:-1] for r in out.splitlines() if r.startswith("| ")][1:]
    bandwidth = [r for r in rows if r[1].strip() == "bandwidth"]
    assert len(bandwidth) == 20 and len(rows) == 38
    for r in bandwidth:
        assert abs(float(r[5].strip().rstrip("%"))) <= 10.0, r


def test_fit_of_the_measured_points_gives_the_testbed_preset():
    pre = m.PRESETS["testbed"]
    fitted = {o: v for o, v, _, _ in m.fit_constants(measured_files(), "testbed", "100mbit")}
    for option, key in (("--latency", "latency_us"), ("--switch-msg-cost", "switch_msg_cost_us"),
                        ("--msg-cost", "msg_cost_us"),
                        ("--switch-byte-cost", "switch_byte_cost_ns"),
                        ("--efficiency", "efficiency"), ("--ffn-gflops", "ffn_gflops"),
                        ("--band-cost", "band_cost_us")):
        assert fitted[option] == pytest.approx(pre[key], rel=0.005), option


def test_runs_of_one_setting_are_taken_at_their_median(tmp_path, capsys):
    pts = tmp_path / "p.points"
    line = "--op agrs --algo ring -N 8 -b 8M --rate 100mbit"
    pts.write_text(f"{line} --measured-ms 1000\n{line} --measured-ms 1300\n"
                   f"{line} --measured-ms 1190.2 --label x\n")
    assert m.main(["check", str(pts)]) == 0
    out = capsys.readouterr().out
    assert "1190.2 ms (3)" in out


def test_a_point_off_by_more_than_the_tolerance_fails_the_check(tmp_path, capsys):
    pts = tmp_path / "p.points"
    pts.write_text("--op agrs --algo ring -N 8 -b 8M --rate 100mbit --measured-ms 2000\n")
    assert m.main(["check", str(pts)]) == 1
    assert "over tolerance" in capsys.readouterr().out
    assert m.main(["check", "--tolerance", "80", str(pts)]) == 0


# incmoe-perf's output of a dc run (tools/perf_dc.c's lines; the numbers are made up).
PERF_DC = """# incmoe-perf: op dc, algo inc, nranks 8, iters 5, warmup 1, check 1
# dc: the dispatch of step i in flight with the combine of step i-1, per step
# tokens 2048, hidden 1024, row 4096 B, E 64, k 8, route zipf:1, placement strided, seed 3
# link 100 Mbit/s per direction; bound = the busiest rank and direction's bytes / link rate
#
#       size        count     type  redop        time    algbw    busbw   #wrong   rows-out    rows-in           up         down       bound t/bound
#        (B)   (elements)                        (us)   (GB/s)   (GB/s)               (max)      (max)     (B, max)     (B, max)        (us)
     8388608      2097152    float    sum   5000000.0   0.0017   0.0112        0      13900      13900     56966144     56966144   4557291.5   1.097
#   rank 0: sent 13900 rows, 56966144 B; received 13900 rows, 56966144 B
# Out of bounds values : 0 OK
"""


def test_check_reads_a_routed_incmoe_perf_output_with_its_tokens_and_routing(tmp_path, capsys):
    out_file = tmp_path / "dc.txt"
    out_file.write_text(PERF_DC)
    points, _ = m.read_measurements([str(out_file)])
    assert len(points) == 1
    pt = points[0]
    assert pt.measured_s == pytest.approx(5.0)
    assert pt.label == "dc inc N=8 @100mbit, E=64 k=8 zipf:1 T=2048 H=1024"
    ns = m.parse_point(pt.argv, "here")
    assert (ns.op, ns.algo, ns.N, ns.E, ns.k, ns.tokens, ns.hidden, ns.route, ns.placement) == \
        ("dc", "inc", 8, 64, 8, 2048.0, 1024, "zipf:1", "strided")
    assert ns.bytes is None  # one size: the tokens' rows, never -b
    assert m.main(["check", "--tolerance", "100", str(out_file)]) == 0
    assert "5000.0 ms (1)" in capsys.readouterr().out


def test_a_routed_output_in_other_types_is_counted_in_fp32_rows_of_its_bytes(tmp_path):
    out_file = tmp_path / "dc.txt"
    out_file.write_text(PERF_DC.replace("hidden 1024, row 4096 B", "hidden 2048, row 4096 B"))
    points, _ = m.read_measurements([str(out_file)])
    assert m.parse_point(points[0].argv, "here").hidden == 1024
    out_file.write_text(PERF_DC.replace("row 4096 B", "row 4098 B"))
    with pytest.raises(m.ModelError, match="rows of 4098 B: the model counts fp32 rows"):
        m.read_measurements([str(out_file)])
    out_file.write_text(PERF_DC.replace("# tokens", "# tok"))
    with pytest.raises(m.ModelError, match="without its '# tokens"):
        m.read_measurements([str(out_file)])


def test_issue_targets_file_has_every_point_measured(capsys):
    """bench/data/model/issue18-targets.points as BENCHMARKS.md quotes it: all 22 testbed points
    carry their measurement; check exits 1 while any bandwidth-bound point is over tolerance."""
    check_targets_file("issue18-targets.points", 22, capsys)


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("argv,message", [
    (["time", "-N", "0"], "-N 0: ranks must be 1..256"),
    (["time", "-N", "257"], "-N 257: ranks must be 1..256"),
    (["time", "--op", "dc", "-N", "16", "-E", "8", "-k", "2"], "expert parallelism needs N <= E"),
    (["time", "-E", "4", "-k", "5"], "1 <= k <= E"),
    (["time", "--route", "zipf"], "--route: expected uniform or zipf:S"),
    (["time", "--rate", "fast"], "--rate: expected a rate"),
    (["time", "--rate", "0mbit"], "--rate: the rate must be above 0"),
    (["time", "-b", "lots"], "-b: expected bytes"),
    (["time", "--op", "scatter"], "--op scatter: expected one of"),
    (["time", "--algo", "tree"], "--algo tree: expected one of"),
    (["time", "--op", "moe", "--mode", "eager"], "--mode eager: expected baseline, pipelined or decode"),
    (["time", "--efficiency", "1.5"], "--efficiency 1.5: must be in"),
    (["time", "--tokens", "inf"], "--tokens inf: must be in"),
    (["time", "--latency", "nan"], "--latency nan: must be in"),
    (["time", "--op", "moe", "--bands", "0"], "--bands 0: must be in"),
    (["predict", "--skew", "-1"], "--skew -1: the zipf exponent must be >= 0"),
    (["rows", "--models", "gpt"], "--models: 'gpt' is not one of"),
    (["check", "/nonexistent/points"], "cannot read /nonexistent/points"),
])
def test_bad_input_is_refused_with_a_reason(argv, message, capsys):
    assert m.main(argv) == 2
    assert message in capsys.readouterr().err


def test_bad_points_name_their_file_and_line(tmp_path, capsys):
    pts = tmp_path / "bad.points"
    pts.write_text("# fine\n--op agrs -N 8 --rate 100mbit\n--op dc --frobnicate 3\n")
    assert m.main(["check", str(pts)]) == 2
    assert f"{pts}:3: unknown options --frobnicate 3" in capsys.readouterr().err
    pts.write_text("--op agrs --measured-us soon\n")
    assert m.main(["check", str(pts)]) == 2
    assert f"{pts}:1: --measured-us takes a number, got 'soon'" in capsys.readouterr().err


# --- the command line and the plot --------------------------------------------------------


def test_the_script_runs_as_a_program():
    out = subprocess.run([TOOL, "time", "--op", "dc", "-N", "8"], capture_output=True, text=True,
                         check=True).stdout
    assert "time / bound" in out


def test_predict_lists_the_three_models_and_marks_n_above_e(capsys):
    assert m.main(["predict", "--samples", "2000"]) == 0
    out = capsys.readouterr().out
    for name in ("OLMoE-1B-7B", "Qwen3-30B-A3B", "DeepSeek-V3"):
        assert name in out
    assert "(N = 128, 256: more ranks than experts, not modelled)" in out
    assert "| 256 | 7.97 |" in out  # DeepSeek-V3 at N=256


@pytest.mark.skipif(shutil.which("gnuplot") is None, reason="gnuplot is not installed")
def test_plot_writes_a_png(tmp_path):
    out = tmp_path / "model.png"
    assert m.main(["plot", "-o", str(out), "--models", "olmoe", "--samples", "2000"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_moe_bench_table_is_read_by_its_header_names():
    """incmoe-moe-bench's columns moved (routing with masked routing, auto_ms with mode
    auto): each output is read by the names its own header gives, values from the file."""
    layer = os.path.join(TOP, "bench", "data", "issue27", "n8-layer")
    pts, _ = m.read_measurements([os.path.join(layer, "model", "model-before-r1.txt")])
    got = {(p.label.split()[1], m.parse_point(p.argv, "here").routing): p for p in pts}
    assert sorted(got) == [("baseline", "masked"), ("pipelined", "masked")]
    assert got["baseline", "masked"].measured_s == pytest.approx(2.388735)
    pipe = got["pipelined", "masked"]
    assert pipe.measured_s == pytest.approx(1.632042)
    assert (m.parse_point(pipe.argv, "here").bands, m.parse_point(pipe.argv, "here").N) == (30, 8)
    # Pipelined mode only: baseline's column is "-", so no baseline point.
    pts, _ = m.read_measurements([os.path.join(layer, "n4", "n4-after-r1.txt")])
    assert [(p.label.split()[1], round(p.measured_s, 6)) for p in pts] == [
        ("pipelined", 0.771928), ("pipelined", 0.5606)]
    # The format before routing: full routing, base_ms and pipe_ms by name as well.
    pts, _ = m.read_measurements([os.path.join(TARGETS, "moe", "calibrated-r1.txt")])
    assert pts[0].measured_s == pytest.approx(1.1400, abs=1e-4)
    assert m.parse_point(pts[0].argv, "here").routing == "full"
