"""An explicit sampler chain (llama-server's `samplers`): each stage against hand-computed
small cases, the order and the absence of stages, and what localspec refuses."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.errors import InvalidSettingsError, UsageError
from localspec.speculative.sampling import (
    Sampler,
    SamplingSettings,
    distribution,
    greedy_token,
)
from localspec.speculative.sampling_chain import DEFAULT_CHAIN, SUPPORTED, parse_chain


def logits_of(*probs: float) -> np.ndarray:
    return np.log(np.array(probs, dtype=np.float32))


def chain(*stages: str, **settings: float) -> SamplingSettings:
    return SamplingSettings(samplers=stages, **settings)  # type: ignore[arg-type]


def test_stages_apply_in_the_listed_order() -> None:
    z = logits_of(0.5, 0.3, 0.2)
    # top_p first: .5 alone reaches .45; temperature 2 first flattens to .416/.322/.263, so
    # top_p keeps two, drawn from the scaled logits: sqrt(.5) : sqrt(.3) = .5635 : .4365
    first = distribution(z, [], chain("top_p", "temperature", top_p=0.45, temperature=2.0))
    then = distribution(z, [], chain("temperature", "top_p", top_p=0.45, temperature=2.0))
    np.testing.assert_allclose(first, [1.0, 0.0, 0.0], atol=1e-7)
    np.testing.assert_allclose(then, [0.5635, 0.4365, 0.0], atol=1e-4)


def test_a_stage_not_listed_is_not_applied() -> None:
    z = logits_of(0.5, 0.3, 0.2)
    # top_k 2 and min_p .5 are set but only top_k is listed; no temperature stage: temperature 1
    settings = chain("top_k", top_k=2, min_p=0.5, temperature=0.3)
    assert not settings.greedy
    np.testing.assert_allclose(distribution(z, [], settings), [0.625, 0.375, 0.0], atol=1e-6)
    # the empty chain (llama.vim's warm-ups): the plain draw at temperature 1
    np.testing.assert_allclose(distribution(z, [], chain(temperature=0.0)), [0.5, 0.3, 0.2])


def test_min_p_and_top_k_cut_what_is_left() -> None:
    z = logits_of(0.4, 0.3, 0.2, 0.1)
    # min_p .5: p >= .2 kept (.4, .3, .2); then top_k 2 of those
    settings = chain("min_p", "top_k", min_p=0.5, top_k=2)
    np.testing.assert_allclose(distribution(z, [], settings), [4 / 7, 3 / 7, 0, 0], atol=1e-6)


def test_penalties_apply_only_when_listed() -> None:
    z = np.array([1.0, 0.8], dtype=np.float32)
    history = [0]
    listed = chain("penalties", "temperature", repeat_penalty=2.0)  # 1.0 -> 0.5 < 0.8
    unlisted = chain("temperature", repeat_penalty=2.0)
    assert listed.penalised and not unlisted.penalised
    assert greedy_token(z, history, listed) == 1
    assert greedy_token(z, history, unlisted) == 0
    # a penalties stage after the greedy temperature stage cannot change the argmax
    assert greedy_token(z, history, chain("temperature", "penalties", repeat_penalty=2.0)) == 0


def test_temperature_zero_is_the_argmax_of_what_the_chain_left() -> None:
    z = logits_of(0.6, 0.4)
    settings = chain("top_k", "temperature", top_k=1, temperature=0.0)
    assert settings.greedy
    assert greedy_token(z, [], settings) == 0
    np.testing.assert_allclose(distribution(z, [], settings), [1.0, 0.0])


def test_the_default_chain_is_unchanged() -> None:
    rng = np.random.default_rng(5)
    z = rng.normal(size=64).astype(np.float32) * 2
    history = [1, 2, 2, 7]
    values = dict(temperature=0.7, top_k=20, top_p=0.9, min_p=0.05, repeat_penalty=1.3)
    default = SamplingSettings(**values)  # type: ignore[arg-type]
    explicit = chain(*DEFAULT_CHAIN, **values)
    np.testing.assert_array_equal(
        distribution(z, history, default), distribution(z, history, explicit)
    )


@pytest.mark.parametrize("stages", [("dry",), ("top_k", "xtc"), ("typ_p",), ("warp",)])
def test_other_stages_are_refused_naming_them(stages: tuple[str, ...]) -> None:
    with pytest.raises(InvalidSettingsError) as caught:
        chain(*stages)
    message = str(caught.value)
    assert repr(stages[-1]) in message
    assert all(name in message for name in SUPPORTED)


def test_llama_cpp_spellings_and_letters() -> None:
    assert parse_chain(["Top-K", "nucleus", "temp", "minp"]) == (
        "top_k",
        "top_p",
        "temperature",
        "min_p",
    )
    assert parse_chain("kpi") == ("top_k", "top_p", "infill")
    assert parse_chain("") == ()
    with pytest.raises(InvalidSettingsError, match="'q'"):
        parse_chain("kq")
    with pytest.raises(InvalidSettingsError, match="'xtc'"):
        parse_chain("kx")


def test_an_infill_chain_needs_the_vocabulary() -> None:
    with pytest.raises(UsageError, match="vocabulary"):
        Sampler(chain("infill"), np.random.default_rng(0))
