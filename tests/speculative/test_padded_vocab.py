"""A pair whose vocabularies differ by padding (Qwen2.5-Coder 7B+ lists 152064 tokens, its
0.5B draft 151936): the draft drafts only ids both have, output stays the target's own, and
a sequence holding an id the draft lacks is drafted nothing without failing."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from localspec import Runtime, RuntimeSettings, SamplingSettings
from localspec.bench.whatif import draft_predictions
from localspec.speculative.auto import AutoDrafter
from localspec.speculative.draft_model import DraftModelProposer, PairVocab
from localspec.speculative.ngram import NGramProposer
from localspec.speculative.proposer import DraftLimits
from localspec.speculative.sampling import Sampler
from localspec.speculative.tuner import DRAFT, HardwareProfile, Tuner
from tests.speculative.auto_steps import propose
from tests.speculative.test_engine import (
    diverged_at_a_near_tie,
    exact_joint,
    joint_pvalue,
    run,
    spec,
)
from tests.tiny_models import N_VOCAB, PARTIAL_DRAFT_NOISE, TinySpec, write_tiny_model

PADDING = 8
PROMPTS = [
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n",
    "The quick brown fox jumps over the lazy dog. The quick brown",
]


def _runtime(target: Path, draft: Path) -> Iterator[Runtime]:
    settings = RuntimeSettings(target=target, draft=draft, n_ctx=512, n_threads=1)
    with Runtime(settings) as runtime:
        runtime.load_draft()
        yield runtime


@pytest.fixture(scope="module")
def padded_target(tiny_models_dir: Path, tiny_draft_noisy: Path) -> Iterator[Runtime]:
    """The target lists PADDING more ids than its draft (the Qwen2.5 7B + 0.5B case)."""
    target = write_tiny_model(tiny_models_dir / "target-padded.gguf", TinySpec(padding=PADDING))
    yield from _runtime(target, tiny_draft_noisy)


@pytest.fixture(scope="module")
def padded_draft(tiny_models_dir: Path, tiny_target: Path) -> Iterator[Runtime]:
    """The draft lists PADDING more ids than its target, and may rank one of them first."""
    spec_ = TinySpec(noise=PARTIAL_DRAFT_NOISE, padding=PADDING)
    draft = write_tiny_model(tiny_models_dir / "draft-noisy-padded.gguf", spec_)
    yield from _runtime(tiny_target, draft)


def test_the_draft_logits_are_fitted_to_the_targets_ids() -> None:
    row = np.arange(4, dtype=np.float32)
    wider = PairVocab(draft=4, target=6).fit(row)
    assert wider.tolist() == [0, 1, 2, 3, -np.inf, -np.inf]  # padding the draft lacks: never
    assert PairVocab(draft=4, target=3).fit(row).tolist() == [0, 1, 2]  # the draft's own: gone
    assert PairVocab(draft=4, target=6).readable([0, 3]) is True
    assert PairVocab(draft=4, target=6).readable([0, 4]) is False
    assert PairVocab(draft=6, target=4).readable([5]) is True  # the target never sends one


@pytest.mark.parametrize("pair", ["padded_target", "padded_draft"])
@pytest.mark.parametrize(("mode", "k"), [("draft", 4), ("hybrid", 4), ("draft", 8)])
def test_greedy_speculation_equals_plain_decoding(
    request: pytest.FixtureRequest, pair: str, mode: str, k: int
) -> None:
    runtime: Runtime = request.getfixturevalue(pair)
    assert runtime.models.draft_model is not None
    assert runtime.models.draft_model.n_vocab != runtime.models.target_model.n_vocab
    tolerated = drafted = accepted = 0
    for prompt in PROMPTS:
        tokens = runtime.prompts.tokenize(prompt)
        plain = run(runtime, tokens, max_tokens=48, ignore_eos=True, spec=spec("off"))
        fast = run(runtime, tokens, max_tokens=48, ignore_eos=True, spec=spec(mode, k))
        tolerated += diverged_at_a_near_tie(runtime, tokens, plain, fast, f"{pair} {mode}")
        drafted += fast.stats.drafted
        accepted += fast.stats.accepted
    assert tolerated <= 1
    assert drafted > 0 and accepted > 0  # the draft model really drafted, and was right


def test_sampling_keeps_the_targets_distribution(padded_target: Runtime) -> None:
    """The draft's q has no mass on the target's padding, p may: min(1, p/q) with the
    residual still gives the target's joint distribution of the first two tokens."""
    tokens = padded_target.prompts.tokenize("ab ab ab ab ab ab ab ab")
    joint = exact_joint(padded_target.models.target_model, tokens)
    counts = dict.fromkeys(joint, 0)
    drafted = 0
    n = 1500
    for seed in range(n):
        settings = SamplingSettings(temperature=1.0, top_k=3, seed=seed)
        done = run(
            padded_target,
            tokens,
            max_tokens=3,
            ignore_eos=True,
            sampling=settings,
            spec=spec("draft", 3),
        )
        counts[done.tokens[0], done.tokens[1]] += 1
        drafted += done.stats.drafted
    assert drafted >= 2 * n
    assert joint_pvalue(joint, counts) > 0.001


def test_a_prompt_holding_an_id_the_draft_lacks_is_answered_without_drafts(
    padded_target: Runtime,
) -> None:
    """A client may send token ids: one the target has and the draft lacks cannot be
    decoded by the draft, so that request is drafted nothing, and the next one is."""
    tokens = padded_target.prompts.tokenize(PROMPTS[0])
    holding = [*tokens[:5], N_VOCAB + 2, *tokens[5:]]
    plain = run(padded_target, holding, max_tokens=24, ignore_eos=True, spec=spec("off"))
    for mode in ("draft", "hybrid", "auto"):
        chosen = replace(spec(mode, 4), learn=False)
        done = run(padded_target, holding, max_tokens=24, ignore_eos=True, spec=chosen)
        assert done.tokens == plain.tokens
        proposer = done.stats.by_proposer.get("draft")
        assert proposer is None or proposer.drafted == 0
    after = run(padded_target, tokens, max_tokens=24, ignore_eos=True, spec=spec("draft", 4))
    assert after.stats.drafted > 0


CHEAP_DRAFT = {
    "verify_s": [0.02, 0.0205, 0.021, 0.0215, 0.022, 0.0225, 0.023, 0.0235, 0.024],
    "draft_s": 0.001,
    "catchup_s": 0.0005,
}


@pytest.mark.parametrize("loaded", [True, False])
def test_auto_offers_no_draft_that_cannot_read_the_sequence(
    padded_target: Runtime, loaded: bool
) -> None:
    """Where the draft pays (a cheap one), auto picks it for a sequence it can read, and
    takes a plain step for one holding an id it lacks: an empty draft priced as a catch-up
    would teach the shared costs a false one. Unloaded, it learns that only on loading."""
    draft = padded_target.models.draft
    assert isinstance(draft, DraftModelProposer)
    tokens = padded_target.prompts.tokenize("hello")
    holding = [*tokens, N_VOCAB + 2]
    for history, can in ((tokens, True), (holding, False)):
        tuner = Tuner(HardwareProfile.from_dict(CHEAP_DRAFT), explore_ngram=False)
        kept = draft if loaded else None
        auto = AutoDrafter(tuner, NGramProposer(2, 12), lambda: draft, lambda: True, loaded=kept)
        auto.start(history)
        made, choice = propose(auto, history, 8, None)
        assert (choice.proposer == DRAFT) is can, (history, choice)
        assert (len(made) > 0) is can
        assert auto.tuner.costs.catchup_s == tuner.calibrated_catchup_s  # nothing learned yet


def test_the_replays_draft_predictions_follow_the_live_draft(
    padded_target: Runtime, padded_draft: Runtime
) -> None:
    """From an id the draft lacks on, nothing is predicted; a draft with padding of its own
    predicts over the target's ids, as it drafts."""
    context = padded_target.models.draft_context
    assert context is not None
    prompt = padded_target.prompts.tokenize("def add(a, b):\n    return a + b\n")
    output = padded_target.prompts.tokenize("def sub(a, b):\n    return a - b\n")
    agrees, confidence = draft_predictions(context, prompt, output, N_VOCAB + PADDING)
    assert any(agrees)
    for at in (0, 3, len(output) - 1):
        holding = [*output[:at], N_VOCAB + 2, *output[at + 1 :]]
        got = draft_predictions(context, prompt, holding, N_VOCAB + PADDING)
        assert got[0] == (*agrees[: at + 1], *(False,) * (len(output) - at - 1))
        # (a batch of another width: the same probabilities to within the kernels' rounding)
        expected = (*confidence[: at + 1], *(0.0,) * (len(output) - at - 1))
        assert got[1] == pytest.approx(expected, abs=1e-4)
    holding = [*prompt[:2], N_VOCAB + 1, *prompt[2:]]
    assert draft_predictions(context, holding, output, N_VOCAB + PADDING) == (
        (False,) * len(output),
        (0.0,) * len(output),
    )
    live, larger = padded_draft.models.draft, padded_draft.models.draft_context
    assert isinstance(live, DraftModelProposer) and live.vocab is not None
    assert larger is not None
    fitted = draft_predictions(larger, prompt, output, N_VOCAB)
    raw = draft_predictions(larger, prompt, output)
    assert fitted != raw  # the draft ranks its own padding first somewhere, or gives it mass
    greedy = Sampler(SamplingSettings(temperature=0.0), np.random.default_rng(0))
    for at in range(len(output)):
        drafted = live.propose([*prompt, *output[:at]], DraftLimits(max_len=1), greedy)
        assert drafted.tokens[0] < N_VOCAB
        assert (drafted.tokens[0] == output[at]) is fitted[0][at]
        assert drafted.confidence[0] == pytest.approx(fitted[1][at], abs=1e-3)
