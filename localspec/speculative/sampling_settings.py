"""What a request asks of sampling: the chain's stages and their knobs, checked once.

Apart from `localspec.speculative.sampling` so that the candidate filters
(`localspec.speculative.candidates`), which the sampler uses, can read the settings without
importing the sampler.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from localspec.errors import InvalidSettingsError
from localspec.speculative.sampling_chain import DEFAULT_CHAIN, check_chain


@dataclass(frozen=True)
class SamplingSettings:
    """What the user asked for; identical semantics to llama.cpp's sampler of the same names.

    `samplers`: the chain's stages in order (`localspec.speculative.sampling_chain` names), or
    None for the default chain. With a chain, only its stages apply (module docstring)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    samplers: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        checks = [
            (
                0.0 <= self.temperature < math.inf,
                "temperature must be a finite number >= 0 (0 means greedy)",
            ),
            (self.top_k >= 0, "top_k must be >= 0 (0 disables it)"),
            (0.0 < self.top_p <= 1.0, "top_p must be in (0, 1]"),
            (0.0 <= self.min_p < 1.0, "min_p must be in [0, 1)"),
            (self.repeat_penalty > 0.0, "repeat_penalty must be > 0 (1 disables it)"),
            (self.repeat_last_n >= 0, "repeat_last_n must be >= 0"),
            (-2.0 <= self.presence_penalty <= 2.0, "presence_penalty must be in [-2, 2]"),
            (-2.0 <= self.frequency_penalty <= 2.0, "frequency_penalty must be in [-2, 2]"),
            # numpy's SeedSequence takes non-negative integers; None draws a fresh seed
            (
                self.seed is None or 0 <= self.seed < 2**63,
                "seed must be in [0, 2**63) (or None for a random one)",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise InvalidSettingsError(message)
        if self.samplers is not None:
            check_chain(self.samplers)

    @property
    def chain(self) -> tuple[str, ...]:
        return DEFAULT_CHAIN if self.samplers is None else self.samplers

    @property
    def greedy(self) -> bool:
        """Temperature 0 in a chain that has a temperature stage (without one: temperature 1)."""
        return self.temperature == 0.0 and "temperature" in self.chain

    @property
    def penalised(self) -> bool:
        return (
            (
                self.repeat_penalty != 1.0
                or self.presence_penalty != 0.0
                or self.frequency_penalty != 0.0
            )
            and self.repeat_last_n > 0
            and "penalties" in self.chain
        )
