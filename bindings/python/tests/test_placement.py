"""incmoe.choose_placement and incmoe.placement_rows against a reference written here.

The reference replays a routing sample on a placement as the C header and the
package's docstring describe it (the per-token rule and the static split), in
plain Python with no code shared with the library; the chooser's placements
are checked for what they promise (every expert somewhere, at most E/N +
extra_slots a rank, ascending distinct ranks) and judged by that reference.
"""

import random

import pytest

import incmoe
from incmoe import placement as pl


def reference_rows(load, placement, split):
    """Each rank's received rows: a token counts once on each rank it visits but its own."""
    n = len(load)
    rows = [0] * n
    if split == "static":
        for r, tokens in enumerate(load):
            picks = {}
            for ids in tokens:
                visits = set()
                for e in ids:
                    i = picks.get(e, 0)
                    picks[e] = i + 1
                    visits.add(placement[e][i % len(placement[e])])
                for x in visits - {r}:
                    rows[x] += 1
        return rows
    for t in range(max((len(x) for x in load), default=0)):
        for r in range(n):
            if t >= len(load[r]):
                continue
            ids = load[r][t]
            visits = {r}

            def go(x):
                if x not in visits:
                    visits.add(x)
                    rows[x] += 1

            for e in ids:
                if len(placement[e]) == 1:
                    go(placement[e][0])
            for e in ids:
                reps = placement[e]
                if len(reps) == 1:
                    continue
                here = [x for x in reps if x in visits]
                go(min(here) if here else min(reps, key=lambda x: (rows[x], x)))
    return rows


def random_load(rng, E, k, N, T, ragged=False):
    return [
        [rng.sample(range(E), k) for _ in range(rng.randint(0, T) if ragged else T)]
        for _ in range(N)
    ]


def zipf_load(rng, E, k, N, T, s=1.0):
    """Expert e drawn in proportion to (e+1)^-s without replacement: rank 0 holds the
    popular ones under the base placement."""
    weights = [(e + 1) ** -s for e in range(E)]
    load = []
    for _ in range(N):
        tokens = []
        for _ in range(T):
            left, ids = list(range(E)), []
            for _ in range(k):
                e = rng.choices(left, [weights[x] for x in left])[0]
                left.remove(e)
                ids.append(e)
            tokens.append(ids)
        load.append(tokens)
    return load


def home(E, N):
    return [[e // (E // N)] for e in range(E)]


def test_rows_match_the_reference_on_random_placements():
    rng = random.Random(29)
    for _ in range(60):
        N = rng.randint(1, 5)
        E = N * rng.randint(1, 4)
        k = rng.randint(1, min(E, 5))
        load = random_load(rng, E, k, N, 8, ragged=True)
        placement = [
            sorted({e // (E // N)} | {r for r in range(N) if rng.random() < 0.3}) for e in range(E)
        ]
        for split in ("per_token", "static"):
            assert incmoe.placement_rows(load, placement, split) == reference_rows(
                load, placement, split
            ), (split, placement, load)


def per_rank_of(p, N):
    """Each rank's experts in placement p, after checking every expert is on ascending,
    distinct ranks in [0, N)."""
    per_rank = [0] * N
    for e, ranks in enumerate(p):
        assert ranks == sorted(set(ranks)) and ranks, (e, ranks)
        for r in ranks:
            assert 0 <= r < N, (e, ranks)
            per_rank[r] += 1
    return per_rank


def test_chosen_placement_holds_every_expert_within_the_slots_and_lowers_the_busiest():
    rng = random.Random(5)
    E, k, N, extra = 16, 4, 4, 1
    load = zipf_load(rng, E, k, N, 48)
    p = incmoe.choose_placement(load, N, extra, num_experts=E)
    assert len(p) == E
    assert max(per_rank_of(p, N)) <= E // N + extra
    ours = max(reference_rows(load, p, "per_token"))
    none = max(reference_rows(load, home(E, N), "per_token"))
    assert ours < none


def test_no_slots_puts_each_expert_on_one_rank_and_fills_every_rank():
    rng = random.Random(1)
    load = zipf_load(rng, 8, 2, 4, 10)
    p = incmoe.choose_placement(load, 4, 0, num_experts=8)
    assert all(len(ranks) == 1 for ranks in p), p
    assert per_rank_of(p, 4) == [2, 2, 2, 2]


def test_numpy_and_torch_samples_read_alike():
    np = pytest.importorskip("numpy")
    rng = random.Random(3)
    load = random_load(rng, 8, 2, 2, 6)
    p = incmoe.choose_placement(load, 2, 1, num_experts=8)
    assert incmoe.choose_placement([np.array(x) for x in load], 2, 1, num_experts=8) == p
    torch = pytest.importorskip("torch")
    assert incmoe.choose_placement([torch.tensor(x) for x in load], 2, 1, num_experts=8) == p


def _choose(load, extra, E):
    return incmoe.choose_placement(load, len(load), extra, num_experts=E)


@pytest.mark.parametrize(
    "call, reason",
    [
        (lambda: _choose([[[0, 9]], [[1, 2]]], 1, 4), "expert id 9"),
        (lambda: _choose([[[0, 0]], [[1, 2]]], 1, 4), "picked twice"),
        (lambda: _choose([[[0, 1]], [[1, 2]]], 1, 3), "num_experts 3"),
        (lambda: _choose([[[0, 1]], [[1, 2]]], 5, 4), "extra_slots 5"),
        (lambda: incmoe.placement_rows([[[0]], [[1]]], [[0], [2]]), "expert 1: replica 0 is rank 2"),
        (lambda: incmoe.placement_rows([[[0]], [[1]]], [[0], [1, 0]]), "not distinct and ascending"),
        (lambda: incmoe.placement_rows([[[0]], [[1]]], [[0], []]), "expert 1 has no replica"),
    ],
)
def test_bad_input_raises_with_the_reason(call, reason):
    with pytest.raises(incmoe.IncmoeError) as info:
        call()
    assert info.value.status == incmoe.Status.ERR_INVALID_ARG
    assert reason in str(info.value)


def test_shapes_the_library_cannot_see_raise_value_error():
    with pytest.raises(ValueError, match="same number of experts"):
        incmoe.choose_placement([[[0, 1]], [[2]]], 2, 1, num_experts=4)
    with pytest.raises(ValueError, match="2 ranks' samples, nranks is 3"):
        incmoe.choose_placement([[[0, 1]], [[2, 3]]], 3, 1, num_experts=4)
    with pytest.raises(ValueError, match="does not fit a C int"):
        incmoe.placement_rows([[[0]], [[1]]], [[0], [2**32 + 1]])
    with pytest.raises(ValueError, match="split"):
        incmoe.placement_rows([[[0]], [[1]]], [[0], [1]], split="even")
    assert pl.placement_rows([[], []], [[0], [1]]) == [0, 0]
