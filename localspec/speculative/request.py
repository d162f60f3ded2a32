"""What one generation asks for besides the models (`GenerationRequest`), and its checks.

Apart from the engine so that the request can be built and checked without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from localspec.constraints.constraint import Constraint
from localspec.errors import InvalidSettingsError
from localspec.speculative.sampling_settings import SamplingSettings
from localspec.speculative.settings import SpecSettings
from localspec.speculative.sources import Span


@dataclass(frozen=True)
class GenerationRequest:
    """Everything one generation needs besides the models."""

    prompt: Sequence[int]
    max_tokens: int = 256
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    spec: SpecSettings = field(default_factory=SpecSettings)
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False  # benchmarks need fixed-length outputs
    route: str = (
        "complete"  # which workload this is (chat, complete, infill): the tuner learns each
    )
    # what the output must match; it ends the generation when complete, even with ignore_eos
    constraint: Constraint | None = None
    # prompt reuse across requests: the shortest cached chunk moved into place by shifting
    # rather than recomputed (None: the engine's `cache_reuse`, the runtime's --cache-reuse;
    # 0: the common prefix only); `cache_prompt` False processes the whole prompt afresh
    cache_reuse: int | None = None
    cache_prompt: bool = True
    # the prompt-processing budget (llama.vim's t_max_prompt_ms): past it the generation ends
    # with nothing generated ("prompt_time") and the next request goes on from the cache
    max_prompt_s: float | None = None
    # parts of the prompt auto's n-gram lookup searches apart (a FIM prompt's suffix and
    # extra chunks: `localspec.speculative.sources`); token positions, set by who built it
    regions: tuple[Span, ...] = ()


def check_reuse(request: GenerationRequest) -> None:
    if request.cache_reuse is not None and request.cache_reuse < 0:
        raise InvalidSettingsError("cache_reuse must be at least 0 (0: reuse the prefix only)")
    if request.max_prompt_s is not None and request.max_prompt_s < 0:
        raise InvalidSettingsError("the prompt-processing budget must be at least 0 (0: none)")
