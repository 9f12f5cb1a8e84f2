"""Offsets too large to pack: folded into the top of the packed range, in order.

The checker packs a position into one long (`partition << 40 | offset`), so
an offset must stay below 2^40. A real history can hold larger ones: a
flipped bit in a record batch's base offset, which its CRC does not cover,
made Kafka serve records at offset 4398046512028 (2^42 + 924) to a consumer
that checked CRCs. Such a read is evidence, so the history is accepted
(HISTORY.md: an offset is an integer) and the few offsets near or above the
limit (core.history.format.FOLD_ABOVE, collected while the history is
validated) are mapped, in order, onto the top values of the packed range.
Every definition compares offsets only by order and equality, so the
anomalies found are those of the true offsets; `unfold` puts the true
offsets back into the results, and the run's results.json warns that it
happened.
"""

from __future__ import annotations

from core.errors import HistoryError
from core.history.format import FOLD_ROOM, MAX_OFFSET

# A literal map of this many entries is cheap to ship to Spark; a history
# with more such offsets is refused rather than checked slowly.
MAX_FOLDED = 10_000


def folding(big: set[int]) -> dict[int, int]:
    """True offset -> folded offset, for the offsets collected above FOLD_ABOVE."""
    if len(big) > min(MAX_FOLDED, FOLD_ROOM):
        raise HistoryError(f"{len(big)} distinct offsets at or above {MAX_OFFSET - FOLD_ROOM + 1}: "
                           f"more than the checker can place (at most {MAX_FOLDED})")
    top = MAX_OFFSET - len(big) + 1
    return {true: top + i for i, true in enumerate(sorted(big))}


def unfold(results, mapping: dict[int, int]):
    """`results` with every folded offset (an int under a key that names an
    offset) back to its true value."""
    back = {v: k for k, v in mapping.items()}
    if not back:
        return results

    def walk(x, key: str = ""):
        if isinstance(x, dict):
            # A final log's `ends` map partitions to offsets.
            return {k: walk(v, "offset" if key == "ends" else k) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v, key) for v in x]
        if type(x) is int and "offset" in key and x in back:
            return back[x]
        return x

    return walk(results)


def warning(mapping: dict[int, int]) -> str:
    """The line results.json's warnings carry when offsets were folded."""
    shown = ", ".join(str(o) for o in sorted(mapping)[:5]) + (", ..." if len(mapping) > 5 else "")
    return (f"{len(mapping)} distinct offsets at or above {MAX_OFFSET - FOLD_ROOM + 1} ({shown}): a broker served "
            "or acknowledged records at offsets no log of this run reached (a corrupt batch's base offset?); "
            "the checker placed them above every other offset, in order, and reports them as they were read")
