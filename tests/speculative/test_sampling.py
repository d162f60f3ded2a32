"""The sampling chain on plain arrays: penalties, filters, temperature, and the one-uniform draw."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.errors import InvalidSettingsError
from localspec.speculative.sampling import (
    Sampler,
    SamplingSettings,
    apply_penalties,
    distribution,
    draw,
    greedy_token,
)


def _logits(*values: float) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def test_greedy_is_argmax_of_penalised_logits() -> None:
    logits = _logits(1.0, 3.0, 2.9, -1.0)
    plain = SamplingSettings()
    assert greedy_token(logits, [], plain) == 1
    penalised = SamplingSettings(repeat_penalty=1.5)
    # token 1 was seen: 3.0 / 1.5 = 2.0 < 2.9
    assert greedy_token(logits, [1], penalised) == 2


def test_penalties_follow_llama_cpp_sign_rule_and_window() -> None:
    logits = _logits(2.0, -2.0, 1.0, 0.5)
    settings = SamplingSettings(repeat_penalty=2.0, repeat_last_n=2, frequency_penalty=0.1)
    out = apply_penalties(logits, [2, 0, 1, 1], settings)
    # window = [1, 1]: only token 1 is penalised, negative logits are multiplied
    assert out[1] == pytest.approx(-2.0 * 2.0 - 2 * 0.1)
    assert out[0] == 2.0 and out[2] == 1.0
    assert logits[1] == -2.0  # input untouched


def test_top_k_top_p_min_p_and_temperature() -> None:
    logits = _logits(4.0, 3.0, 2.0, 1.0, 0.0)
    p = distribution(logits, [], SamplingSettings(temperature=1.0, top_k=2))
    assert np.count_nonzero(p) == 2 and p[0] > p[1] > 0
    p1 = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    p = distribution(logits, [], SamplingSettings(temperature=1.0, top_p=float(p1[0]) + 1e-6))
    assert np.count_nonzero(p) == 2  # first token alone falls just short of top_p
    p = distribution(logits, [], SamplingSettings(temperature=1.0, min_p=0.3))
    assert np.count_nonzero(p) == 2  # p1[1] / p1[0] = e^-1 = 0.37 >= 0.3, e^-2 < 0.3
    hot = distribution(logits, [], SamplingSettings(temperature=2.0))
    cold = distribution(logits, [], SamplingSettings(temperature=0.5))
    assert hot[0] < p1[0] < cold[0]
    assert hot.sum() == pytest.approx(1.0) and cold.sum() == pytest.approx(1.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": -1},
        {"top_p": 0},
        {"top_p": 1.5},
        {"min_p": 1.0},
        {"top_k": -1},
        {"repeat_penalty": 0},
        {"temperature": float("inf")},
        {"temperature": float("nan")},
        {"seed": -1},
        {"seed": 2**63},
    ],
)
def test_invalid_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidSettingsError):
        SamplingSettings(**kwargs)  # type: ignore[arg-type]


def test_draw_uses_one_uniform_and_never_picks_zero_mass() -> None:
    probs = np.array([0.0, 0.5, 0.0, 0.5, 0.0])
    rng = np.random.default_rng(1)
    twin = np.random.default_rng(1)
    picks = [draw(probs, rng) for _ in range(2000)]
    assert set(picks) == {1, 3}
    twin.random(2000)
    assert rng.random() == twin.random()  # both consumed exactly 2000 uniforms


def test_sampler_greedy_consumes_no_randomness() -> None:
    rng = np.random.default_rng(5)
    sampler = Sampler(SamplingSettings(), rng)
    assert sampler.pick(_logits(0.0, 1.0), []) == 1
    assert rng.random() == np.random.default_rng(5).random()
