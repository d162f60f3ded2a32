"""The MTP proposer: the target's own NextN head drafts the next k tokens.

A model that carries MTP layers (Qwen3.5/3.6, GLM-4.5, DeepSeek-V3, ...) needs no draft model:
its NextN head, run by llama.cpp over the target's weights (`localspec.llama.mtp.MtpHead`),
predicts the token after next from the target's hidden state. Drafting feeds the head its own
output state to go further, one head step per drafted token, as llama-server's `draft-mtp`
does. The head samples under the request's sampling settings exactly as the draft model does
(`draft_model.draft_from`): greedy drafts are verified by comparison, sampled ones carry their
distributions as q_draft so that min(1, p/q) keeps the output the target's own. The head
never lags behind: it follows the target's cache in the target's decodes, so there is no
catching up to price (`behind` is 0) and no prompt of its own to process at `reset`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

from localspec.speculative.draft_model import draft_from
from localspec.speculative.proposer import Draft, DraftLimits
from localspec.speculative.protocols import Logits
from localspec.speculative.sampling import Sampler

MTP_SOURCE = "mtp"  # the source an MTP draft names (`Draft.source`)


class NextTokenHead(Protocol):
    """What the proposer needs of an MTP head (`localspec.llama.mtp.MtpHead`)."""

    @property
    def n_ctx(self) -> int: ...

    def first(self, tokens: Sequence[int]) -> Logits:
        """Logits for the token after `tokens[-1]`; the target's cache holds `tokens[:-1]`."""
        ...

    def advance(self, token: int) -> Logits:
        """Logits after the drafted `token`."""
        ...


class MtpProposer:
    """Drafts up to k tokens with the target's MTP head, under the draft model's rules
    (p_min, the tuner's `keep_drafting`, a constraint's masks, q_draft when sampling)."""

    name = MTP_SOURCE

    def __init__(self, head: NextTokenHead) -> None:
        self.head = head

    def reset(self, prompt: Sequence[int]) -> None:
        """Nothing to do: the head followed the target's own prompt processing."""

    def finish(self, tokens: Sequence[int]) -> None:
        """Nothing to learn: the head is frozen."""

    def behind(self, tokens: Sequence[int]) -> int:
        """Tokens to process before drafting: none, the head follows the target's cache."""
        return 0

    def propose(self, tokens: Sequence[int], limits: DraftLimits, sampler: Sampler) -> Draft:
        started = time.perf_counter()
        max_len = min(limits.max_len, self.head.n_ctx - len(tokens))
        if max_len <= 0:
            return Draft([], self.name)
        return draft_from(
            self.head.first(tokens),
            self.head.advance,
            tokens,
            max_len=max_len,
            limits=limits,
            sampler=sampler,
            source=self.name,
            started=started,
        )
