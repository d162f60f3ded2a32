"""Speculation settings: which proposers may draft and how far.

Kept apart from the engine (and free of numpy and llama.cpp) so that the command line can
offer these choices without paying for importing the engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from localspec.errors import InvalidSettingsError

# the fixed modes' early stop when none is given: NOTES measured 84-98% draft acceptance for
# this family, and tokens the draft itself doubts are the ones the target rejects
DEFAULT_P_MIN = 0.6


class SpecMode(StrEnum):
    """Which proposers may draft: none, n-gram lookup, the draft model, n-gram first, or the
    tuner's choice each step (`auto`)."""

    OFF = "off"
    NGRAM = "ngram"
    DRAFT = "draft"
    HYBRID = "hybrid"
    AUTO = "auto"


@dataclass(frozen=True)
class SpecSettings:
    """Speculation knobs: draft-model length and confidence, n-gram length and match length.

    The mode defaults to `auto`, as on every surface: it needs no draft model (the tuner
    drafts with n-gram lookup alone then) and falls back to plain decoding where nothing pays.

    `p_min` is the draft model's early stop: it ends a draft before a token it gives less
    probability than this. `None` (the default) lets `auto` tune the stop token by token from
    measured costs and acceptance per confidence band, and means DEFAULT_P_MIN in the fixed
    modes; a number is a fixed threshold everywhere (in `auto`, a floor under the tuned stop).

    The n-gram defaults (drafts of 3 after a match of at least 5 tokens) come from replaying
    the shipped workloads against verification costs measured on a 2-core CPU, where a batch
    of 4 costs ~2.4x one token: drafting only on long matches keeps prose and JSON at ~1.0x of
    plain decoding while edits gain. `localspec bench` re-measures them on any machine.

    `redecode_ties`: under greedy decoding, a draft is verified in chunks of the calibration's
    exact width, the batch size the kernels compute exactly as one-token decoding (one token
    at a time where none is), so speculation gives plain decoding's answer (see
    `localspec.speculative.ties`). False lets one batch decide: faster, and the answer may
    differ from `off` after a near-tie, as llama-server's may.

    `max_draft_tokens` and `max_draft_ms` are a request's drafting budget: the tokens it may
    draft and the seconds its proposers may spend in all (None: no limit; 0: none at all).
    A budget that runs out ends drafting for the rest of the request, never the request.

    `suffix_drafts`: the n-gram lookups may also draft the most frequent continuation of the
    longest match in the request's own sequence and in a store of earlier requests' prompts
    and answers (`localspec.speculative.suffix`); `auto` weighs them like any other source,
    `ngram` and `hybrid` try the store when the sequence itself has no match.

    `learn` False: the request's prompt and answer teach neither the session's n-gram cache
    nor the suffix store (a benchmark sending one request in several modes, where a later
    mode must not draft an earlier one's answer; text a client would rather not see drafted
    again). The prompt caches still hold the request's KV state as they do for every one.
    """

    mode: SpecMode = SpecMode.AUTO
    draft_max: int = 4
    p_min: float | None = None
    ngram_draft_max: int = 3
    ngram_min_match: int = 5
    redecode_ties: bool = True
    max_draft_tokens: int | None = None
    max_draft_ms: float | None = None
    suffix_drafts: bool = True
    learn: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.draft_max <= 64 or not 0 <= self.ngram_draft_max <= 64:
            raise InvalidSettingsError("draft lengths must be between 0 and 64 tokens")
        if self.p_min is not None and not 0.0 <= self.p_min < 1.0:
            raise InvalidSettingsError("p_min must be in [0, 1)")
        if not 1 <= self.ngram_min_match <= 32:
            raise InvalidSettingsError("ngram_min_match must be between 1 and 32 tokens")
        if self.max_draft_tokens is not None and self.max_draft_tokens < 0:
            raise InvalidSettingsError("max_draft_tokens must be at least 0 (0: draft nothing)")
        if self.max_draft_ms is not None and not 0.0 <= self.max_draft_ms < math.inf:
            raise InvalidSettingsError("max_draft_ms must be a number of at least 0")

    @property
    def fixed_p_min(self) -> float:
        """The threshold the fixed modes (draft, hybrid) stop the draft model at."""
        return DEFAULT_P_MIN if self.p_min is None else self.p_min

    @property
    def uses_draft_model(self) -> bool:
        return self.mode in (SpecMode.DRAFT, SpecMode.HYBRID)
