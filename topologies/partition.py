"""A weighted k-way partition of a small graph: least cut within a balance bound (pure).

Each item has a load, each edge a weight, each part a share of the total load. A
partition is judged, in this order, by: parts left empty, load above the bound
(``(1 + imbalance)`` times a part's share of the total), the cut (the summed weight of
edges between parts), then the largest load-to-share ratio. It starts from the given
assignments, improves each by the best single move or pairwise swap until none
improves it (Fiduccia-Mattheyses style; on a tie the later item moves, so the start's
fabric order shows through), and keeps the first of the best. networkx's
Kernighan-Lin bisection keeps the two halves' item counts, not their loads, and splits
in two only, so it cannot express unequal machines.

Loads and weights are rounded to integers (micro-units) first, so the same input
always takes the same steps to the same answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

MAX_SWAP_ITEMS = 160  # above this, swaps (quadratic in items) are not tried


def partition(
    loads: Sequence[float],
    edges: Mapping[tuple[int, int], float],
    shares: Sequence[float],
    starts: Sequence[Sequence[int]],
    imbalance: float = 0.25,
) -> list[int]:
    """The part of each item: the best local optimum reached from ``starts``."""
    search = _Search([round(x * 1e6) for x in loads], edges, shares, imbalance)
    best: list[int] | None = None
    for start in starts:
        found = search.improve(list(start))
        if best is None or search.key(found) < search.key(best):
            best = found
    if best is None:
        raise ValueError("partition needs at least one start")
    return best


class _Search:
    def __init__(
        self,
        loads: list[int],
        edges: Mapping[tuple[int, int], float],
        shares: Sequence[float],
        imbalance: float,
    ) -> None:
        self.loads = loads
        self.parts = len(shares)
        total = sum(loads)
        self.targets = [total * s / sum(shares) for s in shares]
        self.limits = [t * (1 + imbalance) for t in self.targets]
        self.adjacent: list[list[tuple[int, int]]] = [[] for _ in loads]
        for (a, b), weight in sorted(edges.items()):
            w = round(weight * 1e6)
            self.adjacent[a].append((b, w))
            self.adjacent[b].append((a, w))

    def tally(self, part: list[int]) -> tuple[list[int], list[int], int]:
        """Each part's load and item count, and the cut weight, of ``part``."""
        per_part = [0] * self.parts
        count = [0] * self.parts
        for item, p in enumerate(part):
            per_part[p] += self.loads[item]
            count[p] += 1
        cut = sum(
            w
            for a, peers in enumerate(self.adjacent)
            for b, w in peers
            if a < b and part[a] != part[b]
        )
        return per_part, count, cut

    def key(self, part: list[int]) -> tuple[float, ...]:
        return self._key(*self.tally(part))

    def _key(self, per_part: list[int], count: list[int], cut: int) -> tuple[float, ...]:
        empty = sum(c == 0 for c in count)
        excess = sum(
            max(0.0, load - limit) for load, limit in zip(per_part, self.limits, strict=True)
        )
        spread = max(
            load / t if t > 0 else 0.0 for load, t in zip(per_part, self.targets, strict=True)
        )
        return (empty, excess, cut, spread)

    def _gain(self, part: list[int], item: int, to: int) -> int:
        """How much the cut shrinks when ``item`` moves to part ``to``."""
        here = part[item]
        return sum(
            w if part[b] == to else -w if part[b] == here else 0 for b, w in self.adjacent[item]
        )

    def improve(self, part: list[int]) -> list[int]:
        per_part, count, cut = self.tally(part)
        items = range(len(part) - 1, -1, -1)  # on a tie, the later item moves
        while True:
            best = self._key(per_part, count, cut)
            step: tuple[tuple[int, int], ...] | None = None
            for item in items:
                for to in range(self.parts):
                    here = part[item]
                    if to == here:
                        continue
                    loads, counts = per_part[:], count[:]
                    loads[here] -= self.loads[item]
                    loads[to] += self.loads[item]
                    counts[here] -= 1
                    counts[to] += 1
                    key = self._key(loads, counts, cut - self._gain(part, item, to))
                    if key < best:
                        best, step = key, ((item, to),)
            if len(part) <= MAX_SWAP_ITEMS:
                for a in items:
                    for b in range(len(part) - 1, a, -1):
                        pa, pb = part[a], part[b]
                        if pa == pb:
                            continue
                        loads = per_part[:]
                        shift = self.loads[a] - self.loads[b]
                        loads[pa] -= shift
                        loads[pb] += shift
                        gain = self._gain(part, a, pb) + self._gain(part, b, pa)
                        gain -= 2 * sum(w for peer, w in self.adjacent[a] if peer == b)
                        key = self._key(loads, count, cut - gain)
                        if key < best:
                            best, step = key, ((a, pb), (b, pa))
            if step is None:
                return part
            for item, to in step:
                cut -= self._gain(part, item, to)
                per_part[part[item]] -= self.loads[item]
                count[part[item]] -= 1
                part[item] = to
                per_part[to] += self.loads[item]
                count[to] += 1
