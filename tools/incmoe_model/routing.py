"""Routing statistics: where experts live (the placements), k-bar and u of uniform
routing exactly and of zipf:S by seeded sampling."""

import bisect
import math
import random

from .presets import ModelError


PLACEMENTS = ("contiguous", "strided")


def expert_owner(N, E, placement="contiguous"):
    """Rank of each expert: contiguous blocks (the first E % N ranks one more),
    or strided (expert e on rank e % N)."""
    if N > E:
        raise ModelError(f"N={N} ranks but E={E} experts: expert parallelism needs N <= E")
    if placement == "strided":
        return [e % N for e in range(E)]
    if placement != "contiguous":
        raise ModelError(f"--placement {placement}: expected one of {', '.join(PLACEMENTS)}")
    owner = []
    for r in range(N):
        owner += [r] * (E // N + (1 if r < E % N else 0))
    return owner


class RouteStats:
    """Per-rank routing statistics of one token, the same for every owner:
    q[r]      P(rank r holds one of the token's experts)
    only[r]   P(every expert of the token is on rank r)
    share[r]  expected number of the token's experts on rank r
    and, for a group of ranks lo..hi-1 (a switch's subtree), group(lo, hi):
    (P(every expert of the token is in the group), P(the group holds one of them)).
    """

    def __init__(self, q, only, share, exact, group):
        self.q, self.only, self.share, self.exact = q, only, share, exact
        self.N = len(q)
        self._group, self._groups = group, {}

    def group(self, lo, hi):
        if (lo, hi) not in self._groups:
            self._groups[(lo, hi)] = self._group(lo, hi)
        return self._groups[(lo, hi)]

    def kbar(self):
        """Other ranks a token goes to, averaged over owners."""
        return (self.N - 1) / self.N * sum(self.q)

    def rows(self, T):
        """Rows per rank for T tokens per rank: (u, out, inn) lists.
        u[r]: rows of r whose set holds another rank (masked: each up once),
        out[r]: rows r sends in an all-to-all dispatch, inn[r]: rows r receives."""
        total = sum(self.q)
        u = [T * (1 - o) for o in self.only]
        out = [T * (total - qr) for qr in self.q]
        inn = [(self.N - 1) * T * qr for qr in self.q]
        return u, out, inn


def uniform_stats(N, E, k, placement="contiguous"):
    owner = expert_owner(N, E, placement)
    per = [owner.count(r) for r in range(N)]
    c = math.comb(E, k)
    q = [1 - math.comb(E - e, k) / c for e in per]
    only = [math.comb(e, k) / c for e in per]
    share = [k * e / E for e in per]

    def group(lo, hi):
        e = sum(per[lo:hi])
        return math.comb(e, k) / c, 1 - math.comb(E - e, k) / c
    return RouteStats(q, only, share, exact=True, group=group)


_SAMPLES = {}


def sample_expert_sets(E, k, S, samples, seed):
    """`samples` tokens' expert sets: k experts without replacement, expert e
    drawn in proportion to (e+1)^-S (successive sampling)."""
    key = (E, k, S, samples, seed)
    if key in _SAMPLES:
        return _SAMPLES[key]
    rng = random.Random(seed)
    weights = [(e + 1) ** -S for e in range(E)]
    cum, acc = [], 0.0
    for w in weights:
        acc += w
        cum.append(acc)
    sets = []
    for _ in range(samples):
        chosen, redraws = set(), 0
        while len(chosen) < k:
            if redraws < 4 * k:
                # Redrawing a chosen expert is drawing in proportion among the
                # rest: cheap while the chosen hold little of the weight.
                e = min(bisect.bisect_right(cum, rng.random() * acc), E - 1)
                redraws += e in chosen
            else:
                # They hold most of it (strong skew, k near E): draw among the rest.
                rest = [x for x in range(E) if x not in chosen]
                u = rng.random() * sum(weights[x] for x in rest)
                for e in rest:
                    u -= weights[e]
                    if u < 0:
                        break
            chosen.add(e)
        sets.append(tuple(chosen))
    _SAMPLES[key] = sets
    return sets


def sampled_stats(N, E, k, S, samples, seed, placement="contiguous"):
    owner = expert_owner(N, E, placement)
    qn, onlyn, sharen, masks = [0] * N, [0] * N, [0] * N, {}
    for experts in sample_expert_sets(E, k, S, samples, seed):
        ranks = set()
        for e in experts:
            r = owner[e]
            ranks.add(r)
            sharen[r] += 1
        for r in ranks:
            qn[r] += 1
        if len(ranks) == 1:
            onlyn[next(iter(ranks))] += 1
        mask = sum(1 << r for r in ranks)
        masks[mask] = masks.get(mask, 0) + 1

    def group(lo, hi):
        g = ((1 << hi) - 1) ^ ((1 << lo) - 1)
        inside = sum(n for mask, n in masks.items() if mask & ~g == 0)
        hit = sum(n for mask, n in masks.items() if mask & g)
        return inside / samples, hit / samples
    return RouteStats([x / samples for x in qn], [x / samples for x in onlyn],
                      [x / samples for x in sharen], exact=False, group=group)


def route_stats(p):
    if p.E < p.k or p.k < 1:
        raise ModelError(f"-k {p.k}: need 1 <= k <= E (E={p.E})")
    if p.route[0] == "uniform":
        return uniform_stats(p.N, p.E, p.k, p.placement)
    return sampled_stats(p.N, p.E, p.k, p.route[1], p.samples, p.seed, p.placement)


def kbar_uniform(N, E, k):
    """Issue 18's k-bar: (N-1)(1 - C(E-E/N, k)/C(E, k)), E/N experts per rank."""
    return (N - 1) * (1 - math.comb(E - E // N, k) / math.comb(E, k))
