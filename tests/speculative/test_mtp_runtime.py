"""`RuntimeSettings(mtp=True)`: the draft modes draft with the target's own MTP head."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec import Runtime, RuntimeSettings
from localspec.auto_io import calibration_key, pair_key
from localspec.errors import ModelLoadError, UsageError
from localspec.loading import pair_label
from localspec.speculative.mtp import MTP_SOURCE
from tests.speculative.test_engine import PROMPTS, run, spec
from tests.tiny_mtp_model import TinyMtpSpec, write_tiny_mtp_model


@pytest.fixture(scope="module")
def mtp_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mtp") / "noisy.gguf"
    return write_tiny_mtp_model(path, TinyMtpSpec(noise=0.2))


@pytest.fixture(scope="module")
def runtime(mtp_model: Path) -> Iterator[Runtime]:
    settings = RuntimeSettings(target=mtp_model, mtp=True, n_ctx=512, n_threads=1)
    with Runtime(settings) as loaded:
        yield loaded


def test_the_draft_modes_draft_with_the_head_and_change_nothing(runtime: Runtime) -> None:
    for mode in ("draft", "hybrid"):
        for prompt in PROMPTS[:2]:
            plain = run(runtime, prompt, max_tokens=32, ignore_eos=True, spec=spec("off"))
            fast = run(runtime, prompt, max_tokens=32, ignore_eos=True, spec=spec(mode, 4))
            assert fast.tokens == plain.tokens
            assert fast.stats.drafted > 0
    assert runtime.models.mtp_head is not None and runtime.models.draft_model is None
    assert runtime.engine.draft is not None and runtime.engine.draft.name == MTP_SOURCE
    # the hybrid target steps back with recurrent snapshots, not by recomputing its prefix
    assert runtime.models.target_model.recurrent


def test_mtp_refuses_a_draft_model_and_a_target_without_mtp_layers(
    tmp_path: Path, mtp_model: Path
) -> None:
    with pytest.raises(UsageError, match="no draft model"):
        RuntimeSettings(target=mtp_model, draft=mtp_model, mtp=True)
    assert pair_label(RuntimeSettings(target=mtp_model, mtp=True)) == "noisy+mtp"
    # what auto measured and learned with the head is kept apart from the target's alone
    keys = {
        calibration_key(mtp_model, None, 1, (0, 0), 8, flash_attn="auto", mtp=mtp)
        for mtp in (False, True)
    }
    assert len(keys) == 2
    assert pair_key(mtp_model, None) != pair_key(mtp_model, None, mtp=True)
    plain = write_tiny_mtp_model(tmp_path / "plain.gguf", TinyMtpSpec(mtp=False))
    with pytest.raises(ModelLoadError, match="no MTP"):
        Runtime(RuntimeSettings(target=plain, mtp=True, n_ctx=256, n_threads=1))


def test_auto_prices_the_head_from_calibration(runtime: Runtime) -> None:
    """The calibration times a head step as the draft's token and no catching up (the head
    follows the target); auto offers the head wherever a perfect draft could pay, as it does
    a draft model, and changes nothing. (Whether it drafts on a route is the tuner's call from
    the measured costs: on this tiny model a verification batch costs nearly a token each.)"""
    profile = runtime.calibration.hardware_profile()
    assert profile.draft_s is not None and profile.draft_s > 0
    assert profile.catchup_s == 0.0
    assert profile.draft_s < profile.verify(1)  # one NextN layer, not the whole target
    drafter = runtime.calibration.auto_for("mtp-test")
    pays = profile.draft_can_ever_pay(runtime.settings.tune_k_max)
    assert (drafter.draft_loader is not None) == pays
    if drafter.draft_loader is not None:
        assert drafter.draft_loader().name == MTP_SOURCE
    for prompt in PROMPTS:
        plain = run(runtime, prompt, max_tokens=32, ignore_eos=True, spec=spec("off"))
        auto = run(runtime, prompt, max_tokens=32, ignore_eos=True, spec=spec("auto"))
        assert auto.tokens == plain.tokens
