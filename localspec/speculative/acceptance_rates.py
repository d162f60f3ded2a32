"""How often drafts are accepted: per n-gram source and match band, per draft confidence.

The tuner (`localspec.speculative.tuner`) prices every option by these rates; they are
learned online from verified drafts and from lookups scored without drafting them
(`localspec.speculative.shadows`), start from priors worth a few observations, and forget
slowly so a change of workload is followed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from localspec.speculative.sources import NGRAM

NONE, DRAFT = "none", "draft"


# Pseudo-counts (accepted, rejected) before any data: long context matches and a
# same-family draft are usually right (NOTES: 84-98% draft acceptance), one-token matches
# rarely. Worth a few observations, so measurements take over within a few steps.
PRIORS: dict[str, tuple[float, float]] = {
    f"{NGRAM}/8+": (4.0, 1.0),
    f"{NGRAM}/5-7": (3.0, 1.0),
    f"{NGRAM}/3-4": (1.5, 1.5),
    f"{NGRAM}/2": (1.0, 2.0),
    f"{NGRAM}/1": (1.0, 3.0),
    f"{NGRAM}/forced": (9.0, 1.0),  # tokens a constraint forces: nearly always taken
    DRAFT: (4.0, 1.0),
    # the draft model's tokens by the probability it gave them (its early stop's evidence)
    f"{DRAFT}@90+": (6.0, 1.0),
    f"{DRAFT}@70-90": (3.0, 1.0),
    f"{DRAFT}@50-70": (1.5, 1.0),
    f"{DRAFT}@30-50": (1.0, 1.5),
    f"{DRAFT}@0-30": (1.0, 3.0),
}

_CONFIDENCE_BANDS = ((0.9, "90+"), (0.7, "70-90"), (0.5, "50-70"), (0.3, "30-50"), (0.0, "0-30"))


def confidence_key(confidence: float) -> str:
    """The acceptance-model key of a draft-model token the draft gave this probability."""
    for low, name in _CONFIDENCE_BANDS:
        if confidence >= low:
            return f"{DRAFT}@{name}"
    return f"{DRAFT}@0-30"


def prior(key: str) -> tuple[float, float]:
    """The pseudo-counts a key starts from: its own, else (a region's key) its match band's."""
    found = PRIORS.get(key)
    if found is None and key.startswith(f"{NGRAM}/"):
        found = PRIORS.get(f"{NGRAM}/{key.rsplit('/', 1)[-1]}")
    return found or (1.0, 1.0)


@dataclass
class AcceptanceModel:
    """Per-position acceptance rates with a Beta prior and exponential forgetting.

    `counts[key] = [[accepted_1, drafted_1], [accepted_2, drafted_2], ...]`, where position j
    counts only drafts that reached it with everything before accepted.
    """

    max_positions: int = 16
    decay: float = 0.99
    counts: dict[str, list[list[float]]] = field(default_factory=dict)
    # (the counts it was built from, their number of keys, band -> n-gram keys): `_bands`
    _band_cache: tuple[object, int, dict[str, list[str]]] = field(
        default=(None, 0, {}), init=False, repr=False, compare=False
    )

    def rates(self, key: str, k: int) -> list[float]:
        """Position j's acceptance: the key's counts on top of a prior worth as many drafts
        as its pseudo-counts. An n-gram key's prior is centred on what the other sources'
        lookups of its match band measured (`localspec.speculative.sources`): one source
        starts from what a match that long is worth elsewhere, and its own counts take over
        as they grow. With no other source (every request that names no regions) that is
        the plain prior."""
        rows = self.counts.get(key, [])
        a0, r0 = prior(key)
        pooled = self._others(key)
        out = []
        for j in range(k):
            accepted, tried = rows[j] if j < len(rows) else (0.0, 0.0)
            others = [row[j] for row in pooled if j < len(row)]
            centre = (sum(a for a, _ in others) + a0) / (sum(t for _, t in others) + a0 + r0)
            out.append((accepted + (a0 + r0) * centre) / (tried + a0 + r0))
        return out

    def _others(self, key: str) -> list[list[list[float]]]:
        """The counts of the other sources' n-gram keys of `key`'s match band."""
        if not key.startswith(f"{NGRAM}/"):
            return []
        band = key.rsplit("/", 1)[-1]
        return [self.counts[name] for name in self._bands().get(band, ()) if name != key]

    def _bands(self) -> dict[str, list[str]]:
        """The n-gram keys by match band. Asked for on every step of `auto` and once per
        lookup, so it is kept, and rebuilt only when keys were added (keys are never removed;
        a store replaces `counts` whole, which the identity check notices)."""
        counts = self.counts
        if self._band_cache[0] is not counts or self._band_cache[1] != len(counts):
            bands: dict[str, list[str]] = {}
            for name in counts:
                if name.startswith(f"{NGRAM}/"):
                    bands.setdefault(name.rsplit("/", 1)[-1], []).append(name)
            self._band_cache = (counts, len(counts), bands)
        return self._band_cache[2]

    def observations(self, key: str) -> float:
        rows = self.counts.get(key)
        return rows[0][1] if rows else 0.0

    def update(self, key: str, drafted: int, accepted: int) -> None:
        rows = self.counts.setdefault(key, [[0.0, 0.0] for _ in range(self.max_positions)])
        for row in rows:
            row[0] *= self.decay
            row[1] *= self.decay
        # positions 1..accepted were accepted; position accepted+1 (if drafted) was rejected
        for j in range(min(drafted, accepted + 1, self.max_positions)):
            rows[j][1] += 1.0
            rows[j][0] += 1.0 if j < accepted else 0.0


def expected_tokens(rates: Sequence[float]) -> float:
    """1 + sum over i of the probability that the first i draft tokens are all accepted."""
    total, survive = 1.0, 1.0
    for rate in rates:
        survive *= rate
        total += survive
    return total
