"""`auto` mode end to end on tiny models: calibration, the tuner's choices, exactness, memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from localspec import (
    Finished,
    GenerationRequest,
    Runtime,
    RuntimeSettings,
    SamplingSettings,
    SpecMode,
    SpecSettings,
)
from localspec.auto_io import TunerStore
from localspec.speculative.steptime import PHASES
from localspec.speculative.tuner import HardwareProfile

PROMPT = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n"


def _run(runtime: Runtime, mode: SpecMode, max_tokens: int = 48) -> Finished:
    tokens = runtime.prompts.tokenize(PROMPT)
    request = GenerationRequest(
        tokens, max_tokens=max_tokens, ignore_eos=True, spec=SpecSettings(mode)
    )
    *_, done = runtime.generate(request)
    assert isinstance(done, Finished)
    return done


def test_auto_matches_plain_and_reports_its_choices(
    tiny_target: Path, tiny_draft_exact: Path
) -> None:
    settings = RuntimeSettings(target=tiny_target, draft=tiny_draft_exact, n_ctx=512, n_threads=1)
    with Runtime(settings) as runtime:
        plain = _run(runtime, SpecMode.OFF)
        auto = _run(runtime, SpecMode.AUTO)
        assert auto.tokens == plain.tokens
        stats = auto.stats
        assert sum(stats.tuner_choices.values()) == stats.target_steps
        assert stats.tuner_predicted_tokens_per_s > 0
        profile = runtime.hardware_profile()
        assert len(profile.verify_s) == settings.tune_k_max + 1
        assert all(b >= a for a, b in zip(profile.verify_s, profile.verify_s[1:], strict=False))
        assert profile.draft_s is not None and profile.draft_s > 0


def test_calibration_and_acceptance_persist(tiny_target: Path, tiny_draft_exact: Path) -> None:
    settings = RuntimeSettings(target=tiny_target, draft=tiny_draft_exact, n_ctx=512, n_threads=1)
    with Runtime(settings) as runtime:
        first = runtime.hardware_profile()
        _run(runtime, SpecMode.AUTO)
    assert first.catchup_s is not None and first.catchup_s > 0  # the draft's batch catch-up
    store = TunerStore()
    assert store.calibration_file.exists() and store.acceptance_file.exists()
    with Runtime(settings) as again:
        assert again.hardware_profile() == first  # read from the cache, not measured again
        tuner_counts = again._auto_for("complete").tuner.acceptance.counts
        assert tuner_counts, "acceptance learned by the first runtime was not loaded"


def test_a_calibration_leaves_no_probe_in_either_cache(
    tiny_target: Path, tiny_draft_exact: Path
) -> None:
    """The probes' tokens are nobody's prompt: left in the draft's cache, a server's slot kept
    them and saved them to host memory at every switch (`/slots`: bytes saved, 0 tokens)."""
    settings = RuntimeSettings(target=tiny_target, draft=tiny_draft_exact, n_ctx=512, n_threads=1)
    with Runtime(settings) as runtime:
        runtime.load_draft()
        runtime.hardware_profile()
        draft = runtime.models.draft_context
        assert runtime.models.target_context.n_past == 0
        assert draft is not None and draft.n_past == 0


def test_measured_costs_persist_and_a_recalibration_forgets_them(
    tiny_target: Path, tiny_draft_exact: Path
) -> None:
    """`complete` is a process per prompt: the next one starts from the costs measured."""
    settings = RuntimeSettings(target=tiny_target, draft=tiny_draft_exact, n_ctx=512, n_threads=1)
    with Runtime(settings) as runtime:
        _run(runtime, SpecMode.AUTO)
        learned = runtime._auto_for("complete").tuner.costs
        assert learned.steps > 0 and learned.verify_ratio
    store = TunerStore()
    assert store.costs_file.exists()
    with Runtime(settings) as again:
        costs = again._auto_for("complete").tuner.costs
        assert costs.verify_ratio == pytest.approx(learned.verify_ratio)
        assert costs.overall_ratio == pytest.approx(learned.overall_ratio)
        assert again._auto_for("infill").tuner.costs is costs  # one machine, every route
        again.hardware_profile(recalibrate=True)
        assert again._auto_for("complete").tuner.costs.verify_ratio == {}
    with Runtime(settings) as third:
        assert third._auto_for("complete").tuner.costs.verify_ratio == {}


@pytest.mark.parametrize("mode", [SpecMode.OFF, SpecMode.NGRAM, SpecMode.AUTO])
def test_the_step_profile_accounts_for_every_step(tiny_target: Path, mode: SpecMode) -> None:
    settings = RuntimeSettings(target=tiny_target, n_ctx=512, n_threads=1)
    with Runtime(settings) as runtime:
        stats = _run(runtime, mode, max_tokens=64).stats
    profile = stats.step_profile
    assert sum(row["steps"] for row in profile.values()) == stats.target_steps
    drafted = {kind: row["steps"] for kind, row in profile.items() if kind != "plain"}
    assert all(kind.startswith("ngram:") for kind in drafted)
    assert sum(int(kind.split(":")[1]) * n for kind, n in drafted.items()) == stats.drafted
    if mode is SpecMode.OFF:
        assert set(profile) == {"plain"}
    for row in profile.values():
        assert set(row) <= {"steps", "step", "other", *PHASES}
        assert row["step"] >= sum(v for k, v in row.items() if k not in ("steps", "step")) * 0.999
    # every step but the first decodes on the target (the first reads the prefill's row)
    assert sum(row.get("llama_decode", 0.0) for row in profile.values()) > 0


def test_what_was_learned_is_saved_when_the_stream_is_closed_early(
    tiny_target: Path, tiny_draft_exact: Path
) -> None:
    """Ctrl-C in `complete`, a closed pipe or a vanished client close the stream mid-way."""
    settings = RuntimeSettings(target=tiny_target, draft=tiny_draft_exact, n_ctx=512, n_threads=1)
    with Runtime(settings) as runtime:
        request = GenerationRequest(
            runtime.prompts.tokenize(PROMPT),
            max_tokens=48,
            ignore_eos=True,
            spec=SpecSettings(SpecMode.AUTO),
        )
        stream = runtime.generate(request)
        for _ in range(5):
            next(stream)
        assert not TunerStore().acceptance_file.exists()
        stream.close()
    assert TunerStore().acceptance_file.exists()


def test_a_failed_save_costs_only_the_statistics(
    tiny_target: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings = RuntimeSettings(target=tiny_target, n_ctx=512, n_threads=1)
    with Runtime(settings) as runtime:
        blocked = TunerStore().acceptance_file.parent
        blocked.parent.mkdir(parents=True, exist_ok=True)
        blocked.write_text("a file where the data folder should be")
        done = _run(runtime, SpecMode.AUTO)
    assert done.stats.generated_tokens == 48
    assert "could not save the tuner's statistics" in caplog.text


def test_a_draft_that_can_never_pay_is_not_loaded(
    tiny_target: Path, tiny_draft_exact: Path
) -> None:
    """With a cached profile where the draft costs as much as the target, it stays unloaded."""
    settings = RuntimeSettings(target=tiny_target, draft=tiny_draft_exact, n_ctx=512, n_threads=1)
    with Runtime(settings) as runtime:
        measured = runtime.hardware_profile()
    slow_draft = HardwareProfile(measured.verify_s, draft_s=measured.verify_s[0] * 2)
    assert not slow_draft.draft_can_ever_pay(settings.tune_k_max)
    with Runtime(settings) as runtime:
        runtime.calibration._profile = slow_draft
        done = _run(runtime, SpecMode.AUTO)
        assert runtime.models.draft_model is None
        assert not any(label.startswith("draft") for label in done.stats.tuner_choices)


@pytest.mark.parametrize("seed", [1, 2])
def test_auto_sampling_with_seed_is_reproducible(tiny_target: Path, seed: int) -> None:
    with Runtime(RuntimeSettings(target=tiny_target, n_ctx=512, n_threads=1)) as runtime:
        tokens = runtime.prompts.tokenize(PROMPT)
        sampling = SamplingSettings(temperature=0.8, seed=seed)
        outs = []
        for mode in (SpecMode.OFF, SpecMode.AUTO):
            request = GenerationRequest(
                tokens, max_tokens=24, ignore_eos=True, sampling=sampling, spec=SpecSettings(mode)
            )
            *_, done = runtime.generate(request)
            assert isinstance(done, Finished)
            outs.append(done.tokens)
        # without a draft model, auto only uses n-gram drafts: sample-and-compare consumes the
        # random stream exactly as plain decoding does
        assert outs[0] == outs[1]
