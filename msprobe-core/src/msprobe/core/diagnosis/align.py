"""Which call of one run is which call of the other.

Modules pair by path, direction and occurrence, whatever their class (a module swapped for another class at
the same place is still that place); a module's backward entries, where one run has more of them, pair as an
API called more often does (below). API calls pair within their API and direction, in call order, by the
longest common run of (module path, tensor shapes): an extra or a missing call shifts nothing after it, and
two calls of one API in one module pair by what they were given. An API one run calls more often than the
other pairs last, within the stretches between the calls already paired (anchors): of three alike calls, one
in each of three blocks, the two left in one run pair with those of their own blocks, not with the first two.
What pairs with nothing is extra (this run only) or missing (the other run only).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from difflib import SequenceMatcher

from msprobe.core.diagnosis.calls import BACKWARD, Call, key_of


@dataclass
class Pairing:
    partner: dict[int, Call] = field(default_factory=dict)  # this run's call order -> the other run's call
    extra: list[Call] = field(default_factory=list)  # this run's calls with no partner
    missing: list[Call] = field(default_factory=list)  # the other run's calls with no partner
    substitute: dict[int, Call] = field(default_factory=dict)  # an extra call -> the missing one in its place

    def of(self, call: Call) -> Call | None:
        return self.partner.get(call.order)


def _signature(call: Call) -> tuple:
    shapes = tuple(value.shape for value in (*call.inputs, *call.outputs) if value.tensor)
    return (call.module, shapes)


def pair_calls(ours: list[Call], theirs: list[Call], translate: Callable[[str], str] | None = None) -> Pairing:
    """Pair two runs' calls (``translate``: this run's entry names into the other's, across frameworks)."""

    def key(call: Call) -> str:
        return key_of(translate(call.name)) if translate is not None else call.key

    ours_by_key: dict[str, list[Call]] = defaultdict(list)
    theirs_by_key: dict[str, list[Call]] = defaultdict(list)
    for call in ours:
        ours_by_key[key(call)].append(call)
    for call in theirs:
        theirs_by_key[call.key].append(call)
    pairing = Pairing()
    paired_theirs: set[int] = set()
    backward: list[tuple[list[Call], list[Call]]] = []
    uneven: list[tuple[list[Call], list[Call]]] = []
    uneven_modules: list[tuple[list[Call], list[Call]]] = []
    for name, mine in ours_by_key.items():
        other = theirs_by_key.get(name, [])
        if not other:
            continue
        if mine[0].kind == "module" and mine[0].direction == BACKWARD and len(mine) != len(other):
            uneven_modules.append((mine, other))  # numbered in the order the backward runs: see below
            continue
        if mine[0].kind != "api":  # modules and their gradients: by occurrence
            for a, b in zip(mine, other):
                pairing.partner[a.order] = b
                paired_theirs.add(b.order)
            continue
        if mine[0].direction == BACKWARD:
            backward.append((mine, other))  # after the forward calls, whose pairs decide theirs
            continue
        if len(mine) != len(other):
            uneven.append((mine, other))  # after the even ones, which anchor them
            continue
        _pair_api(mine, other, pairing, paired_theirs)
    if uneven:
        ours_stretch, theirs_stretch = _stretches(ours, theirs, pairing)
        for mine, other in uneven:
            _pair_api(mine, other, pairing, paired_theirs, ours_stretch, theirs_stretch)
    forwards = {call.name: call for call in ours if call.kind == "api" and call.direction != BACKWARD}
    for mine, other in backward:
        _pair_by_forward(mine, other, forwards, pairing, paired_theirs)
        _pair_api([c for c in mine if c.order not in pairing.partner], other, pairing, paired_theirs)
    if uneven_modules:
        # a module called once more in one run: its backward entries are numbered as the backward reaches
        # them, in reverse, so the k-th of one run need not be the k-th of the other; they pair within the
        # stretches between the calls paired so far, as an API called once more does
        ours_stretch, theirs_stretch = _stretches(ours, theirs, pairing)
        for mine, other in uneven_modules:
            _pair_api(mine, other, pairing, paired_theirs, ours_stretch, theirs_stretch)
    pairing.extra = [call for call in ours if call.order not in pairing.partner]
    pairing.missing = [call for call in theirs if call.order not in paired_theirs]
    _substitutes(ours, theirs, pairing)
    return pairing


def _pair_api(
    mine: list[Call],
    other: list[Call],
    pairing: Pairing,
    paired_theirs: set[int],
    ours_stretch: dict[int, int] | None = None,
    theirs_stretch: dict[int, int] | None = None,
) -> None:
    """One API's calls in one direction, by the longest common run of signatures (within the stretches
    between anchors, when given), then the leftovers."""
    free = [c for c in other if c.order not in paired_theirs]
    mine_signatures = [_signature(c) for c in mine]
    free_signatures = [_signature(c) for c in free]
    if ours_stretch is not None and theirs_stretch is not None:
        mine_signatures = [(ours_stretch.get(c.order, -1), *sig) for c, sig in zip(mine, mine_signatures)]
        free_signatures = [(theirs_stretch.get(c.order, -1), *sig) for c, sig in zip(free, free_signatures)]
    for i, j in _align(mine_signatures, free_signatures):
        pairing.partner[mine[i].order] = free[j]
        paired_theirs.add(free[j].order)
    _pair_leftovers(mine, free, pairing, paired_theirs)


def _stretches(ours: list[Call], theirs: list[Call], pairing: Pairing) -> tuple[dict[int, int], dict[int, int]]:
    """Each call's stretch on each side: how many anchors come before it, the anchors being the pairs made so
    far that keep their order on both sides (the longest such run of them)."""
    anchors = _in_order(sorted((order, partner.order) for order, partner in pairing.partner.items()))

    def count(calls: list[Call], positions: list[int]) -> dict[int, int]:
        found, index = {}, 0
        for call in calls:
            while index < len(positions) and positions[index] < call.order:
                index += 1
            found[call.order] = index
        return found

    return count(ours, [a for a, _ in anchors]), count(theirs, [b for _, b in anchors])


def _in_order(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest run of ``pairs`` (sorted by their first) whose second values also rise."""
    tails: list[int] = []  # tails[k]: the index of the pair ending the best run of length k + 1
    tail_values: list[int] = []  # ... and its second value
    before = [-1] * len(pairs)
    for index, (_, second) in enumerate(pairs):
        k = bisect_left(tail_values, second)
        before[index] = tails[k - 1] if k else -1
        if k == len(tails):
            tails.append(index)
            tail_values.append(second)
        else:
            tails[k], tail_values[k] = index, second
    run, index = [], tails[-1] if tails else -1
    while index >= 0:
        run.append(pairs[index])
        index = before[index]
    return run[::-1]


def _pair_by_forward(
    mine: list[Call], other: list[Call], forwards: dict[str, Call], pairing: Pairing, paired_theirs: set[int]
) -> None:
    """A backward entry pairs with the backward of its forward's partner: two calls of one API with tensors of
    the same shapes outside every module (F.relu twice) look alike, and their backward runs in reverse."""
    by_name = {call.name: call for call in other}
    for call in mine:
        forward = forwards.get(call.name[: -len("backward")] + "forward")
        partner = pairing.partner.get(forward.order) if forward is not None else None
        if partner is None or not partner.name.endswith("forward"):
            continue
        theirs = by_name.get(partner.name[: -len("forward")] + "backward")
        if theirs is not None and theirs.order not in paired_theirs:
            pairing.partner[call.order] = theirs
            paired_theirs.add(theirs.order)


def _anchors(calls: list[Call], paired: Callable[[Call], int | None]) -> dict[int, int]:
    """Each call's order -> the key of the last paired call before it (-1 at the start)."""
    last, found = -1, {}
    for call in calls:
        key = paired(call)
        if key is not None:
            last = key
        else:
            found[call.order] = last
    return found


def _substitutes(ours: list[Call], theirs: list[Call], pairing: Pairing) -> None:
    """An extra API call and a missing one between the same two paired calls, in the same module, given and
    returning tensors of the same shapes: one run calls the first where the other calls the second (torch.relu
    for F.relu, gelu for relu)."""
    theirs_key = {partner.order: order for order, partner in pairing.partner.items()}
    ours_gap = _anchors(ours, lambda c: c.order if c.order in pairing.partner else None)
    theirs_gap = _anchors(theirs, lambda c: theirs_key.get(c.order))
    waiting: dict[tuple, list[Call]] = defaultdict(list)
    for call in pairing.missing:
        if call.kind == "api":
            waiting[(theirs_gap.get(call.order), call.module, call.direction, _signature(call)[1])].append(call)
    for call in pairing.extra:
        if call.kind != "api":
            continue
        candidates = waiting.get((ours_gap.get(call.order), call.module, call.direction, _signature(call)[1]))
        if candidates:
            pairing.substitute[call.order] = candidates.pop(0)


_SMALL = 4_000_000  # a middle part this large (product of lengths) is aligned exactly; above it, by signature


def _align(mine: list[tuple], other: list[tuple]) -> list[tuple[int, int]]:
    """Index pairs of the longest common run of two signature lists: the common head and tail directly, the
    part between by difflib when small, else each signature's k-th occurrence with its k-th (linear)."""
    head = 0
    while head < len(mine) and head < len(other) and mine[head] == other[head]:
        head += 1
    tail = 0
    while tail < len(mine) - head and tail < len(other) - head and mine[-1 - tail] == other[-1 - tail]:
        tail += 1
    pairs = [(i, i) for i in range(head)]
    middle_mine, middle_other = mine[head : len(mine) - tail], other[head : len(other) - tail]
    if len(middle_mine) * len(middle_other) <= _SMALL:
        matcher = SequenceMatcher(None, middle_mine, middle_other, autojunk=False)
        for block in matcher.get_matching_blocks():
            pairs.extend((head + block.a + k, head + block.b + k) for k in range(block.size))
    else:
        waiting: dict[tuple, list[int]] = defaultdict(list)
        for j, signature in enumerate(middle_other):
            waiting[signature].append(j)
        taken: dict[tuple, int] = defaultdict(int)
        for i, signature in enumerate(middle_mine):
            queue, used = waiting.get(signature), taken[signature]
            if queue is not None and used < len(queue):
                taken[signature] = used + 1
                pairs.append((head + i, head + queue[used]))
    pairs.extend((len(mine) - tail + k, len(other) - tail + k) for k in range(tail))
    return pairs


def _pair_leftovers(mine: list[Call], other: list[Call], pairing: Pairing, paired: set[int]) -> None:
    """Between two paired calls, unpaired calls of the same count on both sides pair in order: the same calls
    given tensors of other shapes (a changed batch, a cast) are still the same calls."""
    free_mine = [c for c in mine if c.order not in pairing.partner]
    free_other = [c for c in other if c.order not in paired]
    if not free_mine or not free_other:
        return

    # group the free calls of each side by the paired calls around them
    def gaps(calls: list[Call], free: list[Call], is_paired: Callable[[Call], bool]) -> list[list[Call]]:
        groups: list[list[Call]] = [[]]
        free_orders = {c.order for c in free}
        for call in calls:
            if call.order in free_orders:
                groups[-1].append(call)
            elif is_paired(call):
                groups.append([])
        return groups

    mine_gaps = gaps(mine, free_mine, lambda c: c.order in pairing.partner)
    other_gaps = gaps(other, free_other, lambda c: c.order in paired)
    if len(mine_gaps) != len(other_gaps):
        return
    for a_gap, b_gap in zip(mine_gaps, other_gaps):
        if len(a_gap) == len(b_gap):
            for a, b in zip(a_gap, b_gap):
                pairing.partner[a.order] = b
                paired.add(b.order)
