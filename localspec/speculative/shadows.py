"""N-gram lookups the tuner did not draft, scored against what the target then produced.

Under sample-and-compare a drafted proposal is accepted exactly as far as it equals what the
target produces, so a lookup that was not drafted teaches the acceptance model as much as a
drafted one, without the cost of a wider verification batch (`AutoDrafter` keeps them).
"""

from __future__ import annotations

from collections.abc import Sequence

from localspec.speculative.tuner import AcceptanceModel


def matching_prefix(proposal: Sequence[int], truth: Sequence[int]) -> int:
    """How many leading tokens of `proposal` equal `truth`'s: what sample-and-compare accepts."""
    for i, (token, expected) in enumerate(zip(proposal, truth, strict=False)):
        if token != expected:
            return i
    return min(len(proposal), len(truth))


class ShadowLookups:
    """N-gram proposals the tuner did not draft, scored once the target has produced the tokens
    they predicted. Under sample-and-compare a drafted proposal is accepted exactly as far as
    it equals what the target produces, so an undrafted one teaches the acceptance model as
    much as a drafted one, without the cost of a wider verification batch."""

    def __init__(self, acceptance: AcceptanceModel) -> None:
        self.acceptance = acceptance
        # (tuner key, proposed tokens, the history length where they would start)
        self._pending: list[tuple[str, list[int], int]] = []

    def add(self, key: str, proposal: Sequence[int], start: int) -> None:
        self._pending.append((key, list(proposal), start))

    def settle(self, history: Sequence[int]) -> None:
        """Score every proposal whose outcome `history` now decides; keep the others."""
        pending = []
        for key, proposal, start in self._pending:
            produced = history[start : start + len(proposal)]
            matched = matching_prefix(proposal, produced)
            if matched < len(produced) or len(produced) == len(proposal):
                self.acceptance.update(key, len(proposal), matched)
            else:
                pending.append((key, proposal, start))  # all matched so far: wait for more
        self._pending = pending

    def clear(self) -> None:
        self._pending = []
