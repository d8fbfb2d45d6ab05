"""Tests of tools/incmoe-model over switch trees (issue 22): the bytes on every
link against a brute-force count over an explicit tree (every block, partial,
row and ring message routed along its path), the tree's shape, the targets'
points file, and bad input.  Bytes only: no test asserts a time.

Run by `tools/quickstart test` (and alone: python3 -m pytest tests/model).
"""

import itertools

import pytest

from model_tool import check_targets_file, load_tool


m = load_tool()


def params(argv, preset="testbed"):
    ap = m.PointParser(prog="t", add_help=False)
    m.add_time_options(ap)
    return m.params_from(ap.parse_args(list(argv)), preset)


# --- the reference: an explicit tree and every message routed through it ------------------


class Graph:
    """Nodes: ('rank', r) and ('switch', level, lo, hi); parent pointers.
    A link is named by its lower end: ('host', r) for a rank's, (level, lo, hi)
    for a switch's up-link.  Built here from the spreading rule itself."""

    def __init__(self, radices, N):
        self.parent = {}
        self.root = self._build(radices, 0, 0, N)

    def _build(self, radices, level, lo, hi):
        node = ("switch", level, lo, hi)
        if level == len(radices) - 1:
            for r in range(lo, hi):
                self.parent[("rank", r)] = node
            return node
        n, k, start = hi - lo, radices[level], lo
        for i in range(k):
            size = n // k + (1 if i < n % k else 0)
            self.parent[self._build(radices, level + 1, start, start + size)] = node
            start += size
        return node

    @staticmethod
    def link(node):
        return ("host", node[1]) if node[0] == "rank" else node[1:]

    def ancestors(self, node):
        out = [node]
        while out[-1] in self.parent:
            out.append(self.parent[out[-1]])
        return out

    def path(self, a, b):
        """Directed links from node a to node b: (link, 'up' | 'down')."""
        up, down = self.ancestors(a), self.ancestors(b)
        common = next(x for x in up if x in down)
        return [(self.link(x), "up") for x in up[:up.index(common)]] + \
            [(self.link(x), "down") for x in down[:down.index(common)]]

    def links(self):
        return {self.link(x) for x in self.parent}


class Count:
    """Bytes per (link, direction)."""

    def __init__(self):
        self.bytes = {}

    def add(self, edges, nbytes):
        for e in edges:
            self.bytes[e] = self.bytes.get(e, 0.0) + nbytes

    def get(self, link):
        return self.bytes.get((link, "up"), 0.0), self.bytes.get((link, "down"), 0.0)


def multicast(g, src, dsts):
    """Every link of the paths from src to dsts, each once."""
    return {e for d in dsts for e in g.path(src, d)}


def reduction(g, srcs, dst):
    """Every link of the paths from srcs to dst, each once: partials meet and go on as one."""
    return {e for s in srcs for e in g.path(s, dst)}


def rank(r):
    return ("rank", r)


def brute_full(g, N, op, algo, S):
    B = S / N
    c = Count()
    ranks = [rank(r) for r in range(N)]
    for coll in m.tree_components(op):
        if algo != "inc":
            steps = (N - 1) * (2 if coll == "allreduce" else 1)
            for r in range(N):
                c.add(g.path(rank(r), rank((r + 1) % N)), steps * B)
        elif coll == "allgather":
            for src in ranks:
                c.add(multicast(g, src, [d for d in ranks if d != src]), B)
        elif coll == "reducescatter":
            for owner in ranks:
                c.add(reduction(g, [s for s in ranks if s != owner], owner), B)
        else:  # allreduce: reduced up to the root, the result multicast from it
            c.add(reduction(g, ranks, g.root), S)
            c.add(multicast(g, g.root, ranks), S)
    return c


def brute_masked(g, N, op, algo, owner_of, expert_sets, T, R, meta):
    """expert_sets: (expert set, weight) pairs whose weights sum to 1."""
    c = Count()
    comps = m.tree_components(op)
    by_ranks = {}  # the same ranks, the same messages: route each set of ranks once
    for experts, w in expert_sets:
        ranks = frozenset(owner_of[e] for e in experts)
        by_ranks[ranks] = by_ranks.get(ranks, 0.0) + w
    for o in range(N):
        for ranks, w in by_ranks.items():
            dsts = ranks - {o}
            if not dsts:
                continue
            rows = T * w
            if algo != "inc":
                for d in dsts:
                    if "dispatch" in comps:
                        c.add(g.path(rank(o), rank(d)), rows * R)
                    if "combine" in comps:
                        c.add(g.path(rank(d), rank(o)), rows * R)
                continue
            sent = multicast(g, rank(o), [rank(d) for d in dsts])
            if "dispatch" in comps:
                c.add(sent, rows * (R + meta))
            if "combine" in comps:
                c.add(reduction(g, [rank(d) for d in dsts], rank(o)), rows * R)
                # the owner's bitmap follows its dispatch row, but not down to a rank
                c.add({e for e in sent if not (e[0][0] == "host" and e[1] == "down")},
                      rows * meta)
    return c


def model_links(op, algo, p, stats=None):
    """The model's bytes per link: {link: (up, down)} over rank links and up-links."""
    t = m.traffic(op, algo, p, stats)
    out = {("host", r): (t.up[r], t.down[r]) for r in range(p.N)}
    for ln in t.links:
        out[(ln.level, ln.lo, ln.hi)] = (ln.up, ln.down)
    # the rank links as edge_load counts them, beside the one-switch Traffic's
    for r in range(p.N):
        loads = m.edge_load(op, algo, p, stats, r, r + 1, host=True)
        assert (sum(u for u, _ in loads), sum(d for _, d in loads)) == \
            pytest.approx(out[("host", r)], rel=1e-12, abs=1e-9)
    return out


def assert_links_equal(g, model, brute):
    assert set(model) == g.links()
    for link, (up, down) in model.items():
        assert (up, down) == pytest.approx(brute.get(link), rel=1e-9, abs=1e-6), link


SHAPES = [
    ("--leaves", "2", 8),  # 4+4
    ("--leaves", "4", 16),  # 4x4
    ("--leaves", "3", 7),  # 3+2+2
    ("--leaves", "4", 6),  # 2+2+1+1: leaves of one rank
    ("--tree", "2x2x4", 16),  # three levels
    ("--tree", "2x2x2", 7),  # three levels, uneven
    ("--tree", "2x1x3", 5),  # a level of radix 1: a switch over one switch
]


def shape_of(flag, value, N):
    return (int(value), -(-N // int(value))) if flag == "--leaves" else m.parse_tree(value)


@pytest.mark.parametrize("flag,value,N", SHAPES)
@pytest.mark.parametrize("op,algo", [("allgather", "inc"), ("reducescatter", "inc"),
                                     ("allreduce", "inc"), ("agrs", "inc"),
                                     ("allgather", "ring"), ("allreduce", "ring"),
                                     ("agrs", "ring"), ("agrs", "a2a")])
def test_full_collectives_bytes_per_link_equal_routing_every_message(flag, value, N, op, algo):
    S = 3 * 1024 * N
    p = params(["-N", str(N), flag, value, "-b", str(S)])
    g = Graph(shape_of(flag, value, N), N)
    assert_links_equal(g, model_links(op, algo, p), brute_full(g, N, op, algo, S))


def uniform_sets(E, k):
    sets = list(itertools.combinations(range(E), k))
    return [(s, 1 / len(sets)) for s in sets]


@pytest.mark.parametrize("flag,value,N", SHAPES)
@pytest.mark.parametrize("op,algo", [("dispatch", "inc"), ("combine", "inc"), ("dc", "inc"),
                                     ("dispatch", "a2a"), ("dc", "a2a")])
def test_routed_bytes_per_link_equal_routing_every_row(flag, value, N, op, algo):
    E, k, T, H = 2 * N + 1, 3, 100, 16  # uneven experts per rank
    p = params(["-N", str(N), flag, value, "-E", str(E), "-k", str(k), "--tokens", str(T),
                "--hidden", str(H)])
    g = Graph(shape_of(flag, value, N), N)
    brute = brute_masked(g, N, op, algo, m.expert_owner(N, E), uniform_sets(E, k), T, 4 * H,
                         p.meta_bytes)
    assert_links_equal(g, model_links(op, algo, p, m.route_stats(p)), brute)


@pytest.mark.parametrize("placement", ["contiguous", "strided"])
def test_sampled_routing_bytes_per_link_equal_routing_the_same_samples(placement):
    N, E, k, S, M = 8, 16, 4, 1.0, 3000
    p = params(["-N", str(N), "--leaves", "3", "-E", str(E), "-k", str(k), "--route", "zipf:1",
                "--samples", str(M), "--seed", "4", "--placement", placement, "--tokens", "64"])
    g = Graph((3, 3), N)
    sets = [(s, 1 / M) for s in m.sample_expert_sets(E, k, S, M, 4)]
    for algo in ("inc", "a2a"):
        brute = brute_masked(g, N, "dc", algo, m.expert_owner(N, E, placement), sets, 64,
                             p.row, p.meta_bytes)
        assert_links_equal(g, model_links("dc", algo, p, m.route_stats(p)), brute)


# --- the property issue 22 states, in closed form ------------------------------------------


@pytest.mark.parametrize("leaves,N", [(2, 8), (4, 16), (3, 7), (4, 6)])
def test_an_up_link_carries_a_rank_links_bytes_for_ag_rs_and_the_a2a_m_times_over(leaves, N):
    S = 1 << 20
    p = params(["-N", str(N), "--leaves", str(leaves), "-b", str(S), "-E", str(4 * N), "-k", "4",
                "--meta", "0"])
    B = S / N
    pair = m.traffic("agrs", "inc", p)
    ag = m.traffic("allgather", "inc", p)
    rs = m.traffic("reducescatter", "inc", p)
    ar = m.traffic("allreduce", "inc", p)
    for i, ln in enumerate(pair.links):
        k = ln.hi - ln.lo
        assert (ln.up, ln.down) == pytest.approx((S, S))  # = a rank link's, S each way
        assert (ag.links[i].up, ag.links[i].down) == pytest.approx((k * B, (N - k) * B))
        assert (rs.links[i].up, rs.links[i].down) == pytest.approx(((N - k) * B, k * B))
        assert (ar.links[i].up, ar.links[i].down) == pytest.approx((S, S))
    assert max(pair.up) == pytest.approx(S)
    # the ring over contiguous ranks: one ring edge out of a leaf, one in
    ring = m.traffic("agrs", "ring", p)
    for ln in ring.links:
        assert (ln.up, ln.down) == pytest.approx((ring.up[0], ring.up[0]))
    # the all-to-all dispatch: m * (N - m) (owner, rank) pairs each way, against N - 1
    # for a rank's link (uniform routing, the same experts on every rank)
    st = m.route_stats(p)
    a2a = m.traffic("dispatch", "a2a", p, st)
    for ln in a2a.links:
        k = ln.hi - ln.lo
        assert ln.up / a2a.up[0] == pytest.approx(k * (N - k) / (N - 1))
        assert ln.down / a2a.down[0] == pytest.approx(k * (N - k) / (N - 1))


def test_one_switch_as_a_tree_is_one_switch():
    base = ["-N", "8", "-b", "32M"]
    flat = m.collective_time("agrs", "inc", params(base))
    for extra in (["--leaves", "1"], ["--tree", "8"]):
        p = params(base + extra)
        assert p.tree is None
        assert m.collective_time("agrs", "inc", p).total == flat.total


def test_an_in_network_tree_pays_one_hop_each_way_per_level():
    # The per-level terms, not a speed: 2L hops, and 2(L-1) chunks at the up-link's rate
    # and switch messages per collective of the pair.
    base = ["-N", "16", "-b", "32M", "--rate", "50mbit"]
    flat = m.collective_time("agrs", "inc", params(base))
    for shape, levels in (("4x4", 2), ("2x2x4", 3)):
        p = params(base + ["--tree", shape, "--uplink-rate", "25mbit"])
        t = m.collective_time("agrs", "inc", p)
        extra = 2 * (levels - 1)
        assert t.hops == pytest.approx(2 * levels * p.latency_s + extra * 2 * p.switch_msg_cost_s)
        eff_u = p.efficiency * 25e6 / 8
        assert t.sf - flat.sf == pytest.approx(extra * 2 * p.chunk / eff_u)
        assert t.uplink_bound == pytest.approx(32 * 2**20 / (25e6 / 8))


def test_a_small_collective_waits_for_each_levels_busiest_switch():
    p = params(["-N", "7", "--leaves", "3", "-b", "64", "--op", "allreduce"])
    t = m.traffic("allreduce", "inc", p)
    assert t.small
    # leaves of 3, 2, 2 ranks: the first handles 3 in, 3 out, one up and one down; the
    # root 3 in and 3 out
    assert [n for _, _, n in t.switches] == [6, 8, 6, 6]
    assert m.path_work(t)[1] == 8 + 6


def test_leaves_spread_as_the_testbed_does():
    for N, K, sizes in ((8, 2, [4, 4]), (16, 4, [4, 4, 4, 4]), (6, 4, [2, 2, 1, 1]),
                        (7, 3, [3, 2, 2]), (5, 5, [1, 1, 1, 1, 1])):
        p = params(["-N", str(N), "--leaves", str(K)])
        assert m.build_tree(p.tree, N).leaf_sizes() == sizes
    assert m.build_tree((2, 2, 2), 7).leaf_sizes() == [2, 2, 2, 1]
    assert params(["--tree", "2x2x4"]).N == 16  # N defaults to the tree's size


# --- points, check and fit ---------------------------------------------------------------


def test_issue22_targets_file_has_every_point_measured(capsys):
    """bench/data/model/issue22-targets.points as BENCHMARKS.md quotes it ("Switch trees,
    measured"): all 10 testbed points carry their measurement; check exits 1 while any
    bandwidth-bound point is over tolerance."""
    check_targets_file("issue22-targets.points", 10, capsys)


def test_fit_recovers_the_constants_from_tree_points(tmp_path):
    """Points made by the model over trees give back the constants that made them."""
    lines = ["--op allgather --algo ring -N 8 --leaves 2 -b 64 --rate 100mbit",
             "--op allreduce --algo inc -N 16 --leaves 4 -b 64 --rate 50mbit",
             "--op allreduce --algo inc -N 8 --tree 2x2x2 -b 512 --rate 100mbit",
             "--op agrs --algo inc -N 8 --leaves 2 -b 32M --rate 100mbit --uplink-rate 50mbit",
             "--op agrs --algo inc -N 16 --leaves 4 -b 32M --rate 50mbit"]
    text = ""
    for line in lines:
        total, _ = m.model_point(m.parse_point(line.split(), "here"), "testbed")
        text += f"{line} --measured-us {total * 1e6!r}\n"
    pts = tmp_path / "tree.points"
    pts.write_text(text)
    fitted = {o: v for o, v, _, _ in m.fit_constants([str(pts)], "testbed")}
    pre = m.PRESETS["testbed"]
    assert fitted["--latency"] == pytest.approx(pre["latency_us"])
    assert fitted["--switch-msg-cost"] == pytest.approx(pre["switch_msg_cost_us"])
    assert fitted["--efficiency"] == pytest.approx(pre["efficiency"])


@pytest.mark.parametrize("argv,message", [
    (["time", "--tree", "4y4"], "--tree: expected a radix per switch level"),
    (["time", "--tree", "4x0"], "--tree: expected a radix per switch level"),
    (["time", "--leaves", "2", "--tree", "2x4"], "--leaves and --tree both give the tree"),
    (["time", "-N", "4", "--leaves", "5"], "--leaves 5: must be 1..N (N=4)"),
    (["time", "-N", "17", "--tree", "4x4"], "-N 17: more ranks than the tree 4x4 has ports"),
    (["time", "-N", "3", "--tree", "2x2x4"], "-N 3: fewer ranks than the tree 2x2x4 has leaves"),
    (["time", "--tree", "1x8"], "a root over one child is that child"),
    (["time", "--uplink-rate", "50mbit"], "--uplink-rate and --uplink-burst need a tree"),
    (["time", "--leaves", "2", "--uplink-rate", "fast"], "--uplink-rate: expected a rate"),
    (["time", "--leaves", "2", "--switch-rate", "1gbit"], "--switch-rate and --switch-burst "
                                                           "are one switch's link"),
    (["predict", "--tree", "2x4"], "give its tree as --leaves K"),
    (["predict", "-N", "8"], "-N is not taken"),
])
def test_bad_tree_input_is_refused_with_a_reason(argv, message, capsys):
    assert m.main(argv) == 2
    assert message in capsys.readouterr().err


def test_rows_and_time_show_the_up_links(capsys):
    assert m.main(["rows", "--models", "olmoe", "--ns", "8,16", "--leaves", "2"]) == 0
    out = capsys.readouterr().out
    assert "| OLMoE-1B-7B | 8 | 4+4 |" in out
    assert "| 16.00 (1.00x) | 30.00 (1.00x) |" in out  # full and ring at N=16
    assert m.main(["time", "--op", "agrs", "-N", "8", "--leaves", "2", "-b", "8M"]) == 0
    out = capsys.readouterr().out
    assert "tree 2x4: 2 levels, 2 leaves of 4+4 ranks" in out
    assert "up-links (level, ranks below: up, down): 1, 0-3: 8 MiB, 8 MiB; 1, 4-7: 8 MiB, 8 MiB" \
        in out
    assert "1.000 x the busiest rank link's" in out
