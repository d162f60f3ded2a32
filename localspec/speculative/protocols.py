"""What the engine needs from the model layer, as protocols: the engine never imports llama.

`LlamaContext` and `LlamaModel` satisfy these structurally; tests may supply anything else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

Logits = npt.NDArray[np.float32]
WhichLogits = Literal["none", "last", "all"]


class DecodeTimings(Protocol):
    """Nanoseconds a context has spent inside `llama_decode` and copying logits out, since it
    was opened: the engine's step profile (`localspec.speculative.steptime`) reads the
    difference over a step to tell llama.cpp's time from its own."""

    decode_ns: int
    logits_ns: int


class PrefillRecord(Protocol):
    """What one `prefill` reused rather than processed (`localspec.llama.prefill.Prefilled`
    is the one): returned by the call, so the engine puts it in that generation's statistics
    and a warm-up's caller reports it, whatever prefill runs on the context next."""

    @property
    def reused(self) -> int:
        """Prompt tokens the cache held without processing them."""
        ...

    @property
    def shifted(self) -> int:
        """Of them, those in cached chunks shifted into place."""
        ...

    @property
    def restored(self) -> int:
        """All of `reused` where a saved prompt state was restored for them, else 0."""
        ...


class ModelContext(Protocol):
    """A KV cache kept equal to a token list (see `localspec.llama.context`)."""

    @property
    def timings(self) -> DecodeTimings:
        """Running totals of decode and logits-copy time (see `DecodeTimings`)."""
        ...

    @property
    def n_ctx(self) -> int: ...

    def common_prefix(self, tokens: Sequence[int]) -> int:
        """How many leading tokens of `tokens` the cache already holds."""
        ...

    @property
    def n_past(self) -> int:
        """How many tokens the cache holds."""
        ...

    def prefill(
        self,
        tokens: Sequence[int],
        *,
        reuse_min: int = 0,
        deadline: float | None = None,
        restore: bool = True,
    ) -> PrefillRecord:
        """Make the cache hold `tokens`, reusing the common prefix and, with `reuse_min` > 0,
        shifted chunks of at least that many tokens; returns what was reused. With a
        `deadline` (`time.perf_counter()`) it may stop at a prefix of them (see `n_past`).
        `restore` False restores no saved prompt state (a prompt processed afresh)."""
        ...

    def prefill_logits(
        self,
        tokens: Sequence[int],
        *,
        reuse_min: int = 0,
        deadline: float | None = None,
        restore: bool = True,
        interrupt: Callable[[], bool] | None = None,
    ) -> tuple[PrefillRecord, Logits | None]:
        """`prefill` that also returns the logits after the last token, computed in the
        prompt's last batch (decoding it even if cached); None if the deadline or
        `interrupt` (asked between calls and within them) cut it short."""
        ...

    def sync(self, tokens: Sequence[int]) -> Logits:
        """Make the cache hold `tokens`; return the logits that follow the last one."""
        ...

    def decode(self, tokens: Sequence[int], *, logits: WhichLogits) -> Logits:
        """Append `tokens`; return logits rows for none, the last, or all of them."""
        ...

    def truncate(self, length: int) -> None:
        """Forget every token from position `length` on."""
        ...


class Vocabulary(Protocol):
    """Token rendering and end-of-generation detection."""

    def piece(self, token: int) -> bytes: ...

    def is_end_of_generation(self, token: int) -> bool: ...
