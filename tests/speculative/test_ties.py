"""Tie-safe greedy verification on real tiny models, with the batch kernels' rounding made big.

`WideBatchRounding` wraps the target's real llama.cpp context and shifts every logit of a
decode wider than `exact` tokens by up to +-AMPLITUDE (seeded): llama.cpp's CPU backend, whose
repacked kernels switch to a 4-row GEMM at 4 rows, exaggerated until it flips real near-ties.
The guard then knows the noise the way a calibration would (`TieGuard`), and every mode and
draft length must give plain decoding's tokens exactly, decoding no wider than the exact width
(one token at a time where none is exact), while the same runs without the guard must not (or
the wrapper would prove nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from localspec import Finished, GenerationRequest, SamplingSettings, SpecMode, SpecSettings
from localspec.auto_io import KV_DRIFT
from localspec.llama.backend import WhichLogits
from localspec.llama.context import LlamaContext, Logits
from localspec.llama.model import LlamaModel
from localspec.llama.prefill import Prefilled
from localspec.speculative.auto import AutoDrafter
from localspec.speculative.draft_model import DraftModelProposer
from localspec.speculative.engine import Engine
from localspec.speculative.ngram import NGramProposer
from localspec.speculative.protocols import DecodeTimings
from localspec.speculative.ties import TieGuard, top_two_gap
from localspec.speculative.tuner import HardwareProfile, Tuner

AMPLITUDE = 0.3  # the tiny target's top-2 gaps: median 0.6, a quarter under 0.26
PROMPTS = [
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n",
    "The quick brown fox jumps over the lazy dog. The quick brown",
    "<|im_start|>user\nWrite a loop<|im_end|>\n<|im_start|>assistant\n",
]
MODES = [(mode, k) for mode in ("ngram", "draft", "hybrid") for k in (1, 2, 4, 8)] + [("auto", 8)]
# verification nearly free next to a cheap draft: auto drafts long
CHEAP = tuple(1e-3 * (1 + 0.01 * b) for b in range(10))


class WideBatchRounding:
    """A real context whose decodes wider than `exact` tokens come back with rounding noise;
    records the width of every decode so tests can see how verification decoded."""

    def __init__(self, inner: LlamaContext, exact: int) -> None:
        self.inner = inner
        self.exact = exact
        self.widths: list[int] = []

    @property
    def n_ctx(self) -> int:
        return self.inner.n_ctx

    @property
    def tokens(self) -> Sequence[int]:
        return self.inner.tokens

    def common_prefix(self, tokens: Sequence[int]) -> int:
        return self.inner.common_prefix(tokens)

    @property
    def n_past(self) -> int:
        return self.inner.n_past

    @property
    def timings(self) -> DecodeTimings:
        return self.inner.timings

    def prefill(
        self,
        tokens: Sequence[int],
        *,
        reuse_min: int = 0,
        deadline: float | None = None,
        restore: bool = True,
    ) -> Prefilled:
        return self.inner.prefill(tokens, reuse_min=reuse_min, deadline=deadline, restore=restore)

    def prefill_logits(
        self,
        tokens: Sequence[int],
        *,
        reuse_min: int = 0,
        deadline: float | None = None,
        restore: bool = True,
        interrupt: Callable[[], bool] | None = None,
    ) -> tuple[Prefilled, Logits | None]:
        return self.inner.prefill_logits(
            tokens, reuse_min=reuse_min, deadline=deadline, restore=restore, interrupt=interrupt
        )

    def sync(self, tokens: Sequence[int]) -> Logits:
        return self.inner.sync(tokens)

    def truncate(self, length: int) -> None:
        self.inner.truncate(length)

    def decode(self, tokens: Sequence[int], *, logits: WhichLogits) -> Logits:
        position = self.inner.n_past
        rows = self.inner.decode(tokens, logits=logits)
        self.widths.append(len(tokens))
        if len(tokens) <= self.exact or logits != "all":
            return rows
        rng = np.random.default_rng([position, *tokens])
        noise = rng.uniform(-AMPLITUDE, AMPLITUDE, rows.shape).astype(np.float32)
        return rows + noise


class Parts:
    """The engine's parts over the tiny models, as `Runtime` wires them."""

    def __init__(self, target: Path, draft: Path) -> None:
        self.target_model = LlamaModel(target)
        self.draft_model = LlamaModel(draft)
        self.target = LlamaContext(self.target_model, 512, n_threads=1)
        self.draft_context = LlamaContext(self.draft_model, 512, n_threads=1)
        self.draft = DraftModelProposer(self.draft_context)
        self.ngram = NGramProposer(n_min=2, n_max=12)

    def engine(self, exact: int, guard: TieGuard | None) -> tuple[Engine, WideBatchRounding]:
        context = WideBatchRounding(self.target, exact)
        profile = HardwareProfile(CHEAP, draft_s=1e-5, tie_noise=guard.noise if guard else ())
        tuner = Tuner(profile, k_max=8, explore_ngram=False)
        auto = AutoDrafter(tuner, self.ngram, lambda: self.draft)
        auto.verifies_with(guard)
        engine = Engine(
            context, self.target_model, ngram=self.ngram, draft=self.draft, auto=auto, ties=guard
        )
        return engine, context

    def close(self) -> None:
        self.draft_context.close()
        self.target.close()
        self.draft_model.close()
        self.target_model.close()


@pytest.fixture(scope="module")
def parts(tiny_target: Path, tiny_draft_noisy: Path) -> Iterator[Parts]:
    built = Parts(tiny_target, tiny_draft_noisy)
    yield built
    built.close()


def spec(mode: str, k: int, redecode: bool = True) -> SpecSettings:
    """Eager settings: draft on every 2-token match, never stop early."""
    return SpecSettings(
        SpecMode(mode),
        draft_max=k,
        ngram_draft_max=k,
        p_min=0.0,
        ngram_min_match=2,
        redecode_ties=redecode,
    )


def generate(
    engine: Engine, prompt: list[int], settings: SpecSettings, **kwargs: object
) -> Finished:
    request = GenerationRequest(
        prompt=prompt,
        max_tokens=48,
        ignore_eos=True,
        spec=settings,
        **kwargs,  # type: ignore[arg-type]
    )
    done = list(engine.generate(request))[-1]
    assert isinstance(done, Finished)
    return done


def noise_guard(exact: int) -> TieGuard:
    """What a calibration of WideBatchRounding would find: no noise up to `exact` tokens,
    then gap changes of up to 2 * AMPLITUDE."""
    return TieGuard(tuple(0.0 if b <= exact else 2 * AMPLITUDE for b in range(1, 11)))


# -- the rule on plain arrays --------------------------------------------------------------------


def test_exact_width_chunks() -> None:
    cpu_like = TieGuard((0.0, 0.0, 0.0, 0.4, 0.5))
    assert cpu_like.exact_width == 3
    assert cpu_like.chunk(9) == 3 and cpu_like.chunk(2) == 2
    cache_only = TieGuard((0.0, 0.0, KV_DRIFT))  # logits matched at 3, the cache did not
    assert cache_only.exact_width == 2
    no_exact = TieGuard((0.0, 0.2, 0.3))  # one token at a time: plain decoding's own kernel
    assert no_exact.exact_width == 1 and no_exact.chunk(7) == 1
    assert TieGuard(()).exact_width == 1


def test_top_two_gap() -> None:
    assert top_two_gap(np.array([0.5, 3.0, 2.5, -1.0], dtype=np.float32)) == pytest.approx(0.5)
    assert top_two_gap(np.array([2.0, 2.0], dtype=np.float32)) == 0.0
    # the best first or last, and a row masked to -inf but for two tokens or one
    assert top_two_gap(np.array([4.0, 1.0, 3.5], dtype=np.float32)) == pytest.approx(0.5)
    assert top_two_gap(np.array([1.0, 3.5, 4.0], dtype=np.float32)) == pytest.approx(0.5)
    masked = np.full(1000, -np.inf, dtype=np.float32)
    masked[[10, 900]] = (1.0, 1.25)
    assert top_two_gap(masked) == pytest.approx(0.25)
    masked[10] = -np.inf
    assert top_two_gap(masked) == float("inf")
    rows = np.random.default_rng(0).normal(size=(20, 500)).astype(np.float32)
    for row in rows:  # against a sort
        second, first = np.sort(row)[-2:]
        assert top_two_gap(row) == pytest.approx(float(first - second))


# -- the engine, every mode and draft length -----------------------------------------------------


@pytest.mark.parametrize("exact", [3, 1], ids=["exact-width-chunks", "no-exact-width"])
def test_guarded_greedy_speculation_gives_plain_decoding_exactly(parts: Parts, exact: int) -> None:
    guard = noise_guard(exact)
    engine, context = parts.engine(exact, guard)
    unguarded_differs = 0
    for text in PROMPTS:
        prompt = parts.target_model.tokenize(text, add_special=True, parse_special=True)
        plain = generate(engine, prompt, spec("off", 1))
        for mode, k in MODES:
            context.widths.clear()
            fast = generate(engine, prompt, spec(mode, k))
            assert fast.tokens == plain.tokens, f"{mode} k={k} on {text[:20]!r}"
            assert list(context.tokens) == (prompt + fast.tokens)[:-1]  # cache == token list
            assert max(context.widths) <= exact  # never wider than the exact width
            unguarded = generate(engine, prompt, spec(mode, k, redecode=False))
            unguarded_differs += unguarded.tokens != plain.tokens
    assert unguarded_differs >= 3  # the rounding does flip near-ties when the batch decides


def test_sampling_is_left_to_the_batch(parts: Parts) -> None:
    """With sampling the batch decides: seeded n-gram sampling draws the same tokens with and
    without the guard."""
    prompt = parts.target_model.tokenize(PROMPTS[1], add_special=True, parse_special=True)
    guarded, _ = parts.engine(1, noise_guard(1))
    bare, _ = parts.engine(1, None)
    for seed in range(4):
        sampling = SamplingSettings(temperature=0.8, seed=seed)
        a = generate(guarded, prompt, spec("ngram", 4), sampling=sampling)
        b = generate(bare, prompt, spec("ngram", 4), sampling=sampling)
        assert a.tokens == b.tokens


def test_the_tuner_charges_exact_width_chunks() -> None:
    tuner = Tuner(HardwareProfile(tuple(float(b) for b in range(1, 10))), k_max=8)
    rates = [0.5] * 8
    assert tuner.expected_verify_cost(8, rates) == 9.0  # one batch of 9
    # chunks of 3, 3, 3 decoded if the draft survives 3 and 6 positions
    assert tuner.expected_verify_cost(8, rates, 3) == pytest.approx(3 + 3 * 0.5**3 + 3 * 0.5**6)
    assert tuner.expected_verify_cost(2, rates, 3) == 3.0
