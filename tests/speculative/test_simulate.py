"""The cost-model replayer, and the tuner replayed on synthetic traces against fixed settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cache, partial
from typing import Any

import numpy as np
import pytest

from localspec.errors import InvalidSettingsError
from localspec.speculative.draft_model import DRAFT_SOURCE
from localspec.speculative.ngram import NGramProposer
from localspec.speculative.policy import DraftPolicy, RecordedStep
from localspec.speculative.simulate import (
    AutoPolicy,
    FixedPolicy,
    RecordedDraft,
    ReplayPolicy,
    Rerun,
    SimResult,
    Trace,
    compare,
    hindsight,
    replay,
    replay_guard,
)
from localspec.speculative.tuner import (
    DRAFT,
    NGRAM,
    NONE,
    STEADY_BEHIND,
    Choice,
    HardwareProfile,
)

# A GPU where verifying 8 tokens costs ~1.09x one token and a draft token 0.1x (seconds).
GPU = HardwareProfile(verify_s=tuple((1.0 + 0.0125 * b) * 1e-3 for b in range(16)), draft_s=0.1e-3)
# The 2-core CI machine of NOTES.md: a batch of 8 costs 6x one token.
CPU = HardwareProfile(
    verify_s=(0.078, 0.134, 0.177, 0.188, 0.254, 0.323, 0.319, 0.48, 0.513), draft_s=0.042
)
PROFILES = {"gpu": GPU, "cpu": CPU}
AGREEMENT = 0.9


def agreements(rng: np.random.Generator, size: int) -> tuple[bool, ...]:
    return tuple(bool(x) for x in rng.random(size) < AGREEMENT)


def edit_trace(seed: int, size: int = 500, vocab: int = 2000) -> Trace:
    """The model rewrites code given in the prompt, changing a few tokens every ~40."""
    rng = np.random.default_rng(seed)
    code = [int(x) for x in rng.integers(0, vocab, size)]
    instruction = [int(x) for x in rng.integers(vocab, vocab + 100, 20)]
    output: list[int] = []
    i = 0
    while i < size:
        span = int(rng.integers(20, 60))
        output.extend(code[i : i + span])
        i += span
        if i < size:
            # replace 0-2 tokens of the original by 1-3 new ones
            output.extend(int(x) for x in rng.integers(vocab, 2 * vocab, int(rng.integers(1, 4))))
            i += int(rng.integers(0, 3))
    return Trace(tuple(instruction + code), tuple(output), agreements(rng, len(output)), "edit")


def generation_trace(seed: int, size: int = 500, vocab: int = 400) -> Trace:
    """New text unrelated to the prompt; a small vocabulary gives a few chance repeats."""
    rng = np.random.default_rng(seed)
    prompt = tuple(int(x) for x in rng.integers(0, vocab, 100))
    output = tuple(int(x) for x in rng.integers(vocab, 2 * vocab, size))
    return Trace(prompt, output, agreements(rng, size), "generation")


TRACES = {"edit": edit_trace(1), "generation": generation_trace(2)}


def fixed_grid() -> dict[str, Callable[[], ReplayPolicy]]:
    grid: dict[str, Callable[[], ReplayPolicy]] = {"none": lambda: FixedPolicy(NONE, 0)}
    for k in (1, 2, 3, 4, 8):
        for min_match in (1, 3, 5):
            grid[f"ngram:{k}/{min_match}"] = partial(FixedPolicy, NGRAM, k, min_match)
    for k in (1, 2, 3, 4, 6, 8):
        grid[f"draft:{k}"] = partial(FixedPolicy, DRAFT, k)
    grid["hybrid:4"] = lambda: FixedPolicy("hybrid", 4)
    return grid


def chosen(result: SimResult) -> tuple[Choice, ...]:
    """The tuner's choice at every step of a replay of `AutoPolicy`."""
    return tuple(o.proposal.choice for o in result.outcomes if o.proposal.choice is not None)


@cache
def tuned(profile: str, category: str) -> tuple[SimResult, tuple[Choice, ...]]:
    result = replay(TRACES[category], AutoPolicy(PROFILES[profile]), PROFILES[profile])
    return result, chosen(result)


@cache
def speedups(profile: str, category: str) -> dict[str, float]:
    """Tokens/s relative to plain decoding of every fixed setting and of the tuner."""
    policies: dict[str, Callable[[], ReplayPolicy]] = dict(fixed_grid())
    policies["tuner"] = lambda: AutoPolicy(PROFILES[profile])
    return compare([TRACES[category]], policies, PROFILES[profile])


def describe(profile: str, category: str) -> str:
    result, _ = tuned(profile, category)
    ratios = speedups(profile, category)
    return f"tuner chose {result.choices}; speed vs plain {ratios}"


# --- the replayer on hand-made traces --------------------------------------------------------

FLAT = HardwareProfile(verify_s=(1.0, 2.0, 3.0, 4.0, 5.0), draft_s=0.5)


def test_plain_decoding_costs_one_verification_per_token() -> None:
    trace = Trace((1, 2, 3), (4, 5, 6, 7), (True,) * 4)
    result = replay(trace, FixedPolicy(NONE, 0), FLAT)
    assert (result.tokens, result.steps, result.seconds) == (4, 4, 4.0)
    assert result.tokens_per_second == 1.0
    assert result.choices == {NONE: 4}


def test_an_ngram_draft_is_accepted_up_to_the_first_wrong_token() -> None:
    # after "1 2" the lookup proposes "3 4 5 ..." from the prompt; the output diverges at 5
    trace = Trace((1, 2, 3, 4, 5, 6, 1, 2), (3, 4, 9), (False,) * 3, ended=True)
    result = replay(trace, FixedPolicy(NGRAM, 4), FLAT)
    # step 1: drafts 3 4 5 6, accepts 3 4, emits 3 4 9 (the target's token) for verify(5);
    # step 2 finds the end token, as a live run's last step does, for verify(1)
    assert (result.tokens, result.steps, result.seconds) == (3, 2, 6.0)
    assert (result.drafted, result.accepted) == (4, 2)
    assert result.choices == {"ngram:4": 1, NONE: 1}


def test_a_draft_model_run_is_the_agreeing_prefix_and_pays_per_draft_token() -> None:
    trace = Trace((1,), (10, 11, 12, 13, 14), (True, True, False, True, True), ended=True)
    result = replay(trace, FixedPolicy(DRAFT, 3), FLAT)
    # step 1 at t=0: 2 agree, emits 3; step 2 at t=3: 2 agree up to the end, emits 2 (the
    # third drafted token runs past the end, and the end token follows)
    assert (result.tokens, result.steps, result.accepted) == (5, 2, 4)
    assert result.seconds == 2 * (FLAT.verify(4) + 3 * 0.5)
    assert result.choices == {"draft:3": 2}


def test_the_last_step_emits_no_more_than_remains() -> None:
    trace = Trace((1,), (10,), (True,), ended=True)
    result = replay(trace, FixedPolicy(DRAFT, 2), FLAT)
    assert (result.tokens, result.steps, result.accepted) == (1, 1, 1)


def first_step(trace: Trace, policy: ReplayPolicy, profile: HardwareProfile) -> str:
    """What a replay's first step drafted, as its label."""
    return next(iter(replay(trace, policy, profile).choices))


def test_min_match_and_hybrid_fall_back_as_documented() -> None:
    # after "1 2 3 4" the lookup matches 4 tokens ("1 2 3 4" occurred before), offering 5 6 ...
    trace = Trace((1, 2, 3, 4, 5, 6, 1, 2, 3, 4), (5, 6, 9), (True, True, True), ended=True)
    no_draft = HardwareProfile(verify_s=FLAT.verify_s)
    assert first_step(trace, FixedPolicy(NGRAM, 4, min_match=5), FLAT) == NONE
    assert first_step(trace, FixedPolicy(NGRAM, 4, min_match=4), FLAT) == "ngram:4"
    assert first_step(trace, FixedPolicy(NGRAM, 8, min_match=4), FLAT) == "ngram:6"
    assert first_step(trace, FixedPolicy("hybrid", 4, min_match=5), FLAT) == "draft:4"
    assert first_step(trace, FixedPolicy("hybrid", 4, min_match=4), FLAT) == "ngram:4"
    assert first_step(trace, FixedPolicy("hybrid", 4, min_match=5), no_draft) == NONE
    assert first_step(trace, FixedPolicy(DRAFT, 4), no_draft) == NONE


def test_bad_policies_and_traces_are_refused() -> None:
    with pytest.raises(InvalidSettingsError):
        FixedPolicy("medusa", 4)
    with pytest.raises(InvalidSettingsError):
        FixedPolicy(DRAFT, 0)
    with pytest.raises(ValueError, match="one per output position"):
        Trace((1,), (2, 3), (True,))


def test_compare_is_relative_to_plain_decoding() -> None:
    trace = Trace((1,), (10, 11, 12, 13), (True,) * 4)
    ratios = compare(
        [trace], {"none": lambda: FixedPolicy(NONE, 0), "d3": lambda: FixedPolicy(DRAFT, 3)}, FLAT
    )
    # plain: 4 tokens in 4 s; draft 3: 4 tokens in verify(4) + 1.5 = 5.5 s
    assert ratios == pytest.approx({"none": 1.0, "d3": 4.0 / 5.5})


def test_the_synthetic_traces_look_like_their_names() -> None:
    edit, generation = TRACES["edit"], TRACES["generation"]
    copied = replay(edit, FixedPolicy(NGRAM, 8), GPU)
    assert copied.accepted > 0.8 * len(edit.output)
    assert replay(generation, FixedPolicy(NGRAM, 8), GPU).accepted < 0.05 * len(generation.output)
    for trace in (edit, generation):
        assert 0.85 < np.mean(trace.draft_agrees) < 0.95


# --- the tuner on a GPU-like profile: draft long ---------------------------------------------


def test_gpu_generation_drafts_long_with_the_draft_model() -> None:
    _, choices = tuned("gpu", "generation")
    long_drafts = sum(c.proposer == DRAFT and c.k >= 5 for c in choices)
    assert long_drafts > 0.8 * len(choices), describe("gpu", "generation")


def test_gpu_edit_drafts_long() -> None:
    _, choices = tuned("gpu", "edit")
    long_drafts = sum(c.proposer != NONE and c.k >= 5 for c in choices)
    assert long_drafts > 0.8 * len(choices), describe("gpu", "edit")


@pytest.mark.parametrize("category", ["edit", "generation"])
def test_gpu_tuner_is_near_the_best_fixed_setting(category: str) -> None:
    ratios = speedups("gpu", category)
    best = max(value for name, value in ratios.items() if name != "tuner")
    assert ratios["tuner"] >= 0.95 * best, describe("gpu", category)


# --- the tuner on the CPU profile: speculate only where it pays ------------------------------


def test_cpu_generation_decodes_plainly_or_drafts_short() -> None:
    _, choices = tuned("cpu", "generation")
    chosen = [c.k for c in choices if not c.explored]
    assert np.mean(chosen) <= 2, describe("cpu", "generation")
    assert sum(c.proposer == NONE for c in choices) > 0.8 * len(choices)


def test_cpu_generation_is_not_slower_than_plain() -> None:
    assert speedups("cpu", "generation")["tuner"] >= 0.97, describe("cpu", "generation")


def test_cpu_edit_gains_from_the_ngram_lookup() -> None:
    assert speedups("cpu", "edit")["tuner"] > 1.1, describe("cpu", "edit")


# --- the tuned early stop of the draft model -------------------------------------------------

# a CPU whose draft model is cheap enough to pay, but only on tokens it is sure of
CHEAP_DRAFT_CPU = HardwareProfile(verify_s=CPU.verify_s, draft_s=0.012)
# a GPU whose draft costs 0.02x the target (a 7B target with a 0.5B draft, say)
TINY_DRAFT_GPU = HardwareProfile(verify_s=GPU.verify_s, draft_s=0.02e-3)
STOP_PROFILES = {"gpu": GPU, "cheap-draft-cpu": CHEAP_DRAFT_CPU, "tiny-draft-gpu": TINY_DRAFT_GPU}
DOUBT = 0.5  # confidences below this are the "doubtful" tokens


def confidence_trace(seed: int, size: int = 600) -> Trace:
    """Generation where the draft is sure of 75% of tokens (and right 97% of those) and
    doubtful of the rest (right 40%): its confidence predicts its acceptance."""
    rng = np.random.default_rng(seed)
    sure = rng.random(size) < 0.75
    confidence = np.where(sure, rng.uniform(0.9, 1.0, size), rng.uniform(0.2, DOUBT, size))
    agrees = rng.random(size) < np.where(sure, 0.97, 0.4)
    prompt = tuple(int(x) for x in rng.integers(0, 400, 100))
    output = tuple(int(x) for x in rng.integers(400, 800, size))
    return Trace(
        prompt, output, tuple(bool(a) for a in agrees), "generation", tuple(map(float, confidence))
    )


def doubtful_share(profile: HardwareProfile) -> float:
    """Of the tokens the tuner drafted with the draft model by its choice (explored drafts
    are not stopped early, by design), the share it doubted."""
    result = replay(confidence_trace(3), AutoPolicy(profile, draft_primed=True), profile)
    drafted = [
        confidence
        for outcome in result.outcomes
        if outcome.proposal.choice is not None and not outcome.proposal.choice.explored
        for confidence in outcome.proposal.draft.confidence
    ]
    assert len(drafted) > 100, "the draft model was hardly used"
    return float(np.mean(np.array(drafted) < DOUBT))


def test_a_trace_checks_its_confidences_too() -> None:
    with pytest.raises(ValueError, match="draft_confidence has 1 entries"):
        Trace((1,), (2, 3), (True, True), draft_confidence=(0.5,))


def test_fixed_p_min_stops_the_replayed_draft() -> None:
    trace = Trace(
        (1,), (10, 11, 12, 13), (True,) * 4, draft_confidence=(0.9, 0.9, 0.3, 0.9), ended=True
    )
    result = replay(trace, FixedPolicy(DRAFT, 4, p_min=0.5), FLAT)
    # step 1 drafts 10 11 and stops before the doubtful 12; the target emits 12, then 13
    assert result.choices == {"draft:2": 1, "draft:1": 1}
    assert (result.tokens, result.accepted) == (4, 3)


def test_the_early_stop_cuts_doubtful_tokens_where_a_wider_batch_is_dear() -> None:
    shares = [doubtful_share(p) for p in (CHEAP_DRAFT_CPU, GPU, TINY_DRAFT_GPU)]
    # 25% of positions are doubtful (and 40% right): each extra token is worth drafting only
    # where it costs little against the speed the step already expects
    cpu, gpu, tiny_draft_gpu = shares
    assert cpu < 0.05, shares
    # a draft token at 0.1x the target is dearer for doubtful ones than at 0.02x, so the GPU
    # is held to drafting clearly fewer than the tiny draft's GPU
    assert gpu < 0.6 * tiny_draft_gpu, shares
    assert tiny_draft_gpu > 0.15, shares


@pytest.mark.parametrize("profile", sorted(STOP_PROFILES))
def test_the_tuned_stop_matches_the_best_fixed_threshold(profile: str) -> None:
    chosen = STOP_PROFILES[profile]
    policies: dict[str, Callable[[], ReplayPolicy]] = {}
    for k in (1, 2, 3, 4, 6, 8):
        for p_min in (0.0, 0.5, 0.8):
            policies[f"draft:{k}/p{p_min}"] = partial(FixedPolicy, DRAFT, k, 1, p_min)
    policies["tuner"] = lambda: AutoPolicy(chosen, draft_primed=True)
    ratios = compare([confidence_trace(4)], policies, chosen)
    best = max(value for name, value in ratios.items() if name != "tuner")
    assert ratios["tuner"] >= 0.95 * best, ratios


# --- hindsight and the runtime's auto policy ---------------------------------------------------


def test_hindsight_drafts_exactly_what_will_be_accepted() -> None:
    # the output copies the prompt's 1..8 after "1 2", then goes its own way
    trace = Trace((1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 2), (3, 4, 5, 9, 9), (False,) * 5)
    batches = HardwareProfile(verify_s=(1.0, 1.2, 1.4, 1.6, 1.8))
    result = hindsight(trace, batches)
    # step 1 drafts "3 4 5" (all accepted) and emits 9 too; the rest is plain decoding.
    # The first step's pending token was decoded by the prefill, a plain step's cost (1.0),
    # so its verification decodes the 3 drafted tokens (1.4), as the runtime's does
    assert result.choices == {"ngram:3": 1, NONE: 1}
    assert (result.tokens, result.accepted, result.drafted) == (5, 3, 3)
    assert result.seconds == pytest.approx(1.0 + 1.4 + 1.0)
    # where a batch costs as much as its tokens one by one, drafting never pays
    assert hindsight(trace, FLAT).choices == {NONE: 5}


# A CPU whose batches round like one-token decoding up to 3 tokens (llama.cpp's CPU backend):
# the runtime's greedy verification decodes 3 tokens at a time there, however cheap a wider
# batch would be.
CHUNKED = HardwareProfile(
    verify_s=tuple(1.0 + 0.2 * b for b in range(16)), tie_noise=(0.0, 0.0, 0.0) + (0.5,) * 13
)


def copying_trace() -> Trace:
    """An answer that copies 40 prompt tokens whole, after a match the lookup finds."""
    code = tuple(range(100, 140))
    return Trace((7, *code, 8, 9, 100), code[1:], (False,) * 39)


def test_replay_decodes_exact_width_chunks_as_the_runtime_does() -> None:
    trace = copying_trace()
    batched = HardwareProfile(CHUNKED.verify_s)  # no kernel noise measured: one batch
    chunked = replay(trace, FixedPolicy(NGRAM, 8), CHUNKED)
    whole = replay(trace, FixedPolicy(NGRAM, 8), batched)
    assert [o.verdict.accepted for o in chunked.outcomes] == [
        o.verdict.accepted for o in whole.outcomes
    ]
    drafted = [len(o.proposal.draft) for o in whole.outcomes]
    assert max(drafted) == 8
    # every step of 8 drafted tokens pays three decodes (3 + 3 + 3 rows), not one of 9 rows
    extra = sum(3 * CHUNKED.verify(3) - CHUNKED.verify(9) for k in drafted if k == 8)
    assert chunked.seconds - whole.seconds == pytest.approx(extra)
    # `+batch-ties` turns the guard off: one batch again
    spec = replace(FixedPolicy(NGRAM, 8).spec, redecode_ties=False)
    assert replay_guard(CHUNKED, spec) is None
    assert replay_guard(CHUNKED, FixedPolicy(NGRAM, 8).spec) is not None


class _KeepsDrafter(AutoPolicy):
    """`AutoPolicy` that keeps the last drafter it made, to read what it priced."""

    drafter: DraftPolicy | None = None

    def policy(self, ngram: NGramProposer, draft: RecordedDraft | None) -> DraftPolicy:
        self.drafter = super().policy(ngram, draft)
        return self.drafter


def test_the_replayed_tuner_prices_the_chunks_it_is_verified_in() -> None:
    chunked = _KeepsDrafter(CHUNKED)
    batched = _KeepsDrafter(HardwareProfile(CHUNKED.verify_s))
    replay(copying_trace(), chunked, CHUNKED)
    replay(copying_trace(), batched, batched.tuner.profile)
    widths = [getattr(p.drafter, "verify_chunk", "none") for p in (chunked, batched)]
    assert widths == [3, None]


def test_hindsight_prices_exact_width_chunks() -> None:
    trace = copying_trace()
    whole = hindsight(trace, CHUNKED)
    chunked = hindsight(trace, CHUNKED, chunk=3)
    assert chunked.tokens == whole.tokens == 39
    # one batch of 17 rows costs 4.2 (17 / 4.2 tokens a second): drafts run to the limit;
    # chunks of 3 rows cost 1.4 each, so no draft does better than 3 / 1.4 tokens a second
    assert max(map(_drafted, whole.choices)) == 16
    assert whole.tokens_per_second > 3.5
    assert chunked.tokens_per_second == pytest.approx(3 / 1.4, rel=0.1)


def _drafted(label: str) -> int:
    return int(label.split(":")[1]) if ":" in label else 0


def test_hindsight_is_plain_decoding_when_nothing_would_be_accepted() -> None:
    trace = Trace((1, 2, 3), (7, 8, 9), (False,) * 3)
    result = hindsight(trace, FLAT)
    assert result.tokens_per_second == replay(trace, FixedPolicy(NONE, 0), FLAT).tokens_per_second


@pytest.mark.parametrize("category", ["edit", "generation"])
def test_no_policy_beats_hindsight(category: str) -> None:
    for profile in (GPU, CPU):
        best = hindsight(TRACES[category], profile).tokens_per_second
        for make in fixed_grid().values():
            assert replay(TRACES[category], make(), profile).tokens_per_second <= best * 1.0001


def test_auto_policy_learns_ngram_acceptance_without_drafting() -> None:
    policy = AutoPolicy(CPU)
    result = replay(TRACES["generation"], policy, CPU)
    learned = sum(policy.tuner.acceptance.observations(k) for k in policy.tuner.acceptance.counts)
    assert learned > 0  # every lookup was scored against what the target produced
    assert result.choices.get(NONE, 0) > 0.8 * result.steps
    assert not any(c.startswith(NGRAM) for c in result.choices if result.choices[c] > 10)


def scripted(draft_steps: set[int], steps: int) -> Rerun:
    """Draft-model drafts of one token at the given steps, plain decoding otherwise."""
    return Rerun([RecordedStep(DRAFT_SOURCE, int(i in draft_steps)) for i in range(steps)])


def test_draft_steps_pay_their_overhead_and_returning_pays_the_catch_up() -> None:
    trace = Trace((1,), (10, 11, 12, 13, 14, 15, 16), (False,) * 7)  # every draft is rejected
    result = replay(
        trace, scripted({0, 1, 5}, 7), FLAT, draft_step_overhead=1.0, catchup_per_token=0.5
    )
    draft_step = (1 + 1.0) * 0.5
    # steps 0 and 1 draft in a row (the draft is 0, then 1 token behind: nothing to catch up);
    # step 5 comes after three plain steps: 4 tokens behind, 2 beyond the steady ones. The
    # first step's pending token was decoded with the prompt, and its row rejects the draft's
    # first token, so that draft is never decoded (as live): it verifies for verify(1).
    verifying = 2 * FLAT.verify(2) + 5 * FLAT.verify(1)
    expected = 3 * draft_step + 2 * 0.5 * 0.5 + verifying
    assert result.steps == 7
    assert result.seconds == pytest.approx(expected)
    assert replay(trace, scripted({0, 1, 5}, 7), FLAT).seconds == pytest.approx(3 * 0.5 + verifying)


def test_auto_policy_is_told_how_far_behind_the_draft_is() -> None:
    """The replay runs the runtime's AutoDrafter: the draft starts unloaded, so the tuner is
    first told it would catch up on the whole prompt, and after a draft step on almost none."""
    policy = AutoPolicy(GPU)
    seen: list[tuple[int, str]] = []
    choose = policy.tuner.choose

    def watching(*args: Any, **kwargs: Any) -> Choice:
        choice = choose(*args, **kwargs)
        seen.append((kwargs["draft_behind"], choice.proposer))
        return choice

    policy.tuner.choose = watching  # type: ignore[method-assign]
    trace = TRACES["generation"]
    replay(trace, policy, GPU)
    assert seen[0][0] == len(trace.prompt)
    after_a_draft = [seen[i][0] for i in range(1, len(seen)) if seen[i - 1][1] == DRAFT]
    assert after_a_draft and max(after_a_draft) <= STEADY_BEHIND
