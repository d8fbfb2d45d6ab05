"""Switch trees (issue 22): their shapes, which ranks each switch covers, and the
bytes and messages on every up-link and at every switch."""

import math
import re

from .presets import MAX_RANKS, ModelError
from .flows import FULL_OPS, Traffic, chunks


MAX_LEVELS = 8


def parse_tree(text):
    """Radices per switch level from the root down: '4x4', '2x2x4'."""
    parts = str(text).lower().split("x")
    if not all(re.fullmatch(r"[0-9]+", x) for x in parts) or len(parts) > MAX_LEVELS or \
            not all(1 <= int(x) <= MAX_RANKS for x in parts):
        raise ModelError(f"--tree: expected a radix per switch level from the root down, each "
                         f"1..{MAX_RANKS}, at most {MAX_LEVELS} levels, such as 4x4 or 2x2x4; "
                         f"got '{text}'")
    return tuple(int(x) for x in parts)


def tree_shape(N, leaves, radices):
    """The radices of the tree N ranks run over, or None for one switch."""
    if leaves is not None and radices is not None:
        raise ModelError("--leaves and --tree both give the tree: give one")
    if leaves is not None:
        if not 1 <= leaves <= N:
            raise ModelError(f"--leaves {leaves}: must be 1..N (N={N}): every leaf serves a rank")
        if leaves == 1:
            return None  # one switch
        radices = (leaves, math.ceil(N / leaves))
    if radices is None:
        return None
    if N > math.prod(radices):
        raise ModelError(f"-N {N}: more ranks than the tree {tree_text(radices)} has ports "
                         f"for ({math.prod(radices)})")
    if N < math.prod(radices[:-1]):
        raise ModelError(f"-N {N}: fewer ranks than the tree {tree_text(radices)} has leaves "
                         f"({math.prod(radices[:-1])}): every leaf serves a rank")
    if len(radices) == 1:
        return None  # one switch
    if radices[0] == 1:
        raise ModelError(f"--tree {tree_text(radices)}: a root over one child is that child: "
                         f"give the root a radix of 2 or more")
    return radices


def tree_text(radices):
    return "x".join(str(r) for r in radices)


def rank_range(lo, hi):
    return str(lo) if hi == lo + 1 else f"{lo}-{hi - 1}"


class Switch:
    """One switch of a tree: its level (0: the root), its ranks lo..hi-1, its
    parent's index (None: the root) and its children's."""

    def __init__(self, level, lo, hi, parent):
        self.level, self.lo, self.hi, self.parent = level, lo, hi, parent
        self.children = []


class Tree:
    """N ranks under switches of the given radices, spread from the root down:
    a switch gives its children contiguous ranges of its ranks, the first
    n % radix one more (tools/testbed's --leaves rule, at every level).
    Switch 0 is the root; every other switch has one up-link, to its parent."""

    def __init__(self, radices, N):
        self.radices, self.N, self.levels = radices, N, len(radices)
        self.switches = []
        self._build(0, 0, N, None)

    def _build(self, level, lo, hi, parent):
        idx = len(self.switches)
        self.switches.append(Switch(level, lo, hi, parent))
        if parent is not None:
            self.switches[parent].children.append(idx)
        if level == self.levels - 1:
            return
        r, n, start = self.radices[level], hi - lo, lo
        for i in range(r):
            size = n // r + (1 if i < n % r else 0)
            self._build(level + 1, start, start + size, idx)
            start += size

    def leaf_sizes(self):
        return [s.hi - s.lo for s in self.switches if s.level == self.levels - 1]


_TREES = {}


def build_tree(radices, N):
    if (radices, N) not in _TREES:
        _TREES[(radices, N)] = Tree(radices, N)
    return _TREES[(radices, N)]


def tree_components(op):
    """The collectives an op runs at once."""
    return {"agrs": ("allgather", "reducescatter"), "dc": ("dispatch", "combine")}.get(op, (op,))


def edge_load(op, algo, p, stats, lo, hi, host=False):
    """Bytes (up, down) of each of op's collectives on the link above ranks
    lo..hi-1: a switch's up-link, or with host a rank's own link (hi = lo + 1).
    Every link parts the ranks below it (m of them) from the N - m beyond."""
    N, m = p.N, hi - lo
    loads = []
    for c in tree_components(op):
        if c in FULL_OPS:
            S = p.gathered
            B = S / N
            if algo == "inc":
                # A block crosses a link once toward the ranks beyond it; a partial
                # crosses once, reduced over the ranks behind it, toward its owner
                # (the owner's leaf adds its own ranks' partial last); an AllReduce
                # sends one vector up, reduced below, and gets one back.
                up, down = {"allgather": (m * B, (N - m) * B),
                            "reducescatter": ((N - m) * B, m * B), "allreduce": (S, S)}[c]
            else:
                # Ring order 0 -> 1 -> ... -> N-1 -> 0, routed through the tree: a link
                # carries every ring edge that leaves its ranks or enters them.
                each = (N - 1) * B * (2 if c == "allreduce" else 1)
                leave = sum(1 for r in range(lo, hi) if not lo <= (r + 1) % N < hi)
                enter = sum(1 for r in range(N) if not lo <= r < hi and lo <= (r + 1) % N < hi)
                up, down = leave * each, enter * each
        else:
            T, R, meta = p.tokens, p.row, p.meta_bytes
            inside, hit = stats.group(lo, hi)
            if algo == "inc":
                leave = m * T * (1 - inside)  # rows owned below with a rank of their set beyond
                reach = (N - m) * T * hit  # rows owned beyond with a rank of their set below
                # The combine mirrors the dispatch; the owner's resent bitmaps follow
                # its dispatch rows to every switch that sums the row's partials, but
                # not down to a rank.
                if c == "dispatch":
                    up, down = leave * (R + meta), reach * (R + meta)
                else:
                    up, down = reach * R + leave * meta, leave * R + (0 if host else reach * meta)
            else:
                # Point to point: a row once to each rank of its set.
                q_in = sum(stats.q[lo:hi])
                out_rows, in_rows = m * T * (sum(stats.q) - q_in), (N - m) * T * q_in
                up, down = out_rows * R, in_rows * R
                if c == "combine":
                    up, down = down, up
        loads.append((up, down))
    return loads


class Link:
    """A switch's up-link: the ranks lo..hi-1 below it, its level (its switch's),
    each collective's (up, down) bytes and their sums."""

    def __init__(self, switch, loads):
        self.level, self.lo, self.hi = switch.level, switch.lo, switch.hi
        self.loads = loads
        self.up = sum(u for u, _ in loads)
        self.down = sum(d for _, d in loads)


def tree_traffic(op, algo, p, stats, flat):
    """The collective over p.tree: flat is its one-switch Traffic, whose rank
    links it keeps (a rank's link carries what it carries under one switch)."""
    tree = build_tree(p.tree, p.N)
    links = {i: Link(sw, edge_load(op, algo, p, stats, sw.lo, sw.hi))
             for i, sw in enumerate(tree.switches) if i}
    if algo != "inc":
        # Rank to rank, routed by the switches' hosts: no switch process on the path.
        return Traffic(flat.up, flat.down, hops_s=flat.hops_s, links=list(links.values()))
    comps = len(tree_components(op))

    def msgs(nbytes):
        return comps if flat.small else chunks(nbytes, p.chunk)

    switches, sw_in, sw_out = [], 0.0, 0.0
    for i, sw in enumerate(tree.switches):
        # (bytes toward the switch, bytes from it) on each of its links
        sides = [(links[c].up, links[c].down) for c in sw.children]
        if not sw.children:
            sides += [(flat.up[r], flat.down[r]) for r in range(sw.lo, sw.hi)]
        if i:
            sides.append((links[i].down, links[i].up))
        b_in, b_out = sum(a for a, _ in sides), sum(b for _, b in sides)
        switches.append((sw.level, b_in + b_out, sum(msgs(a) + msgs(b) for a, b in sides)))
        sw_in, sw_out = sw_in + b_in, sw_out + b_out
    # Each level below the root is one more hop each way: its latency, and a
    # store-and-forward of one chunk (a small collective: its whole message) at
    # the up-link's rate; a chunked collective also waits for each extra
    # switch's handling of its chunk (a one-message collective's switch work is
    # all on its path: see Timing).
    extra = 2 * (tree.levels - 1)
    eff_u = p.efficiency * p.uplink_rate_bps / 8
    hops = 2 * tree.levels * p.latency_s
    if flat.small:
        sf = 0.0
        for level in range(1, tree.levels):
            at = [ln for ln in links.values() if ln.level == level]
            for d in (0, 1):
                msg = max(max(load[d] for load in ln.loads) for ln in at)
                sf += max(msg - p.uplink_burst, 0.0) / eff_u
    else:
        sf = extra * flat.sf_bytes / eff_u
        hops += extra * comps * p.switch_msg_cost_s
    return Traffic(flat.up, flat.down, sw_in=sw_in, sw_out=sw_out,
                   sw_msgs=sum(n for _, _, n in switches), hops_s=hops, sf_bytes=flat.sf_bytes,
                   small=flat.small, links=list(links.values()), switches=switches, sf_extra_s=sf)


def path_work(t):
    """(bytes, messages) of the switch work a one-message collective waits for:
    each level's busiest switch in turn (its ranks' messages must all be in
    before one leaves it); one switch: all of its work."""
    if t.switches is None:
        return t.sw_in + t.sw_out, t.sw_msgs
    b = n = 0
    for level in sorted({lv for lv, _, _ in t.switches}):
        _, wb, wn = max((w for w in t.switches if w[0] == level), key=lambda w: (w[2], w[1]))
        b, n = b + wb, n + wn
    return b, n
