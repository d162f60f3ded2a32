"""Speculation settings from the command line, the chosen pair's models.toml settings, and the
defaults, in that order; a pair's bad setting is a one-line error naming the pair."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from localspec.cli import build_parser
from localspec.cli.options import draft_need, model_files, spec_settings
from localspec.errors import LocalspecError, UsageError
from localspec.models import load_registry
from localspec.speculative.engine import SpecMode, SpecSettings


def user_registry(target: Path, draft: Path, settings: str) -> None:
    lines = [
        "[models.tiny-target]",
        f'path = "{target}"',
        "[models.tiny-draft]",
        f'path = "{draft}"',
        "[pairs.tiny]",
        'target = "tiny-target"',
        'draft = "tiny-draft"',
        f"settings = {{ {settings} }}",
    ]
    registry = Path(os.environ["XDG_CONFIG_HOME"]) / "localspec" / "models.toml"
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry.write_text("\n".join(lines) + "\n")


def settings_for(*argv: str) -> SpecSettings:
    return spec_settings(build_parser().parse_args(["complete", *argv]))


@pytest.fixture
def tiny_pair(tiny_target: Path, tiny_draft_exact: Path) -> tuple[Path, Path]:
    user_registry(tiny_target, tiny_draft_exact, 'spec = "hybrid", draft_max = 6, p_min = 0.3')
    return tiny_target, tiny_draft_exact


def test_the_pairs_settings_apply_when_the_pair_is_chosen(tiny_pair: tuple[Path, Path]) -> None:
    settings = settings_for("-m", "tiny")
    assert settings.mode is SpecMode.HYBRID
    assert (settings.draft_max, settings.p_min) == (6, 0.3)
    assert settings.ngram_draft_max == SpecSettings().ngram_draft_max  # not set by the pair


def test_options_given_on_the_command_line_win(tiny_pair: tuple[Path, Path]) -> None:
    settings = settings_for("-m", "tiny", "--spec", "off", "--draft-max", "2")
    assert (settings.mode, settings.draft_max, settings.p_min) == (SpecMode.OFF, 2, 0.3)


def test_drafting_budgets_come_from_the_command_line(tiny_pair: tuple[Path, Path]) -> None:
    settings = settings_for("-m", "tiny", "--max-draft-tokens", "5", "--max-draft-ms", "2.5")
    assert (settings.max_draft_tokens, settings.max_draft_ms) == (5, 2.5)
    unset = settings_for("-m", "tiny")
    assert (unset.max_draft_tokens, unset.max_draft_ms) == (None, None)  # no limit


def test_suffix_drafts_are_on_unless_the_option_or_the_pair_turns_them_off(
    tiny_target: Path, tiny_draft_exact: Path
) -> None:
    assert settings_for("--target", str(tiny_target)).suffix_drafts is True
    assert settings_for("--target", str(tiny_target), "--no-suffix-drafts").suffix_drafts is False
    user_registry(tiny_target, tiny_draft_exact, "suffix_drafts = false")
    assert settings_for("-m", "tiny").suffix_drafts is False
    user_registry(tiny_target, tiny_draft_exact, 'suffix_drafts = "no"')
    with pytest.raises(UsageError, match="suffix_drafts must be true or false, not 'no'"):
        settings_for("-m", "tiny")


def test_without_a_pair_the_defaults_apply(tiny_pair: tuple[Path, Path]) -> None:
    target, draft = tiny_pair
    for argv in (("--target", str(target)), ("-m", "tiny", "--draft", str(draft))):
        settings = settings_for(*argv)
        assert (settings.mode, settings.draft_max, settings.p_min) == (SpecMode.AUTO, 4, None)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("draft_mx = 3", "unknown setting(s) draft_mx"),
        ('spec = "medusa"', "'medusa' is not a valid SpecMode"),
        ("draft_max = 500", "draft lengths must be between 0 and 64"),
    ],
)
def test_a_bad_pair_setting_names_the_pair(
    tiny_target: Path, tiny_draft_exact: Path, setting: str, message: str
) -> None:
    user_registry(tiny_target, tiny_draft_exact, setting)
    with pytest.raises(UsageError, match=r"models\.toml pair 'tiny'") as caught:
        settings_for("-m", "tiny")
    assert message in str(caught.value)


def test_a_bad_command_line_value_is_not_blamed_on_the_pair(tiny_pair: tuple[Path, Path]) -> None:
    with pytest.raises(UsageError, match="draft lengths must be between 0 and 64") as caught:
        settings_for("-m", "tiny", "--draft-max", "500")
    assert "models.toml" not in str(caught.value)


def test_every_shipped_pair_has_valid_settings_and_leaves_auto_the_default() -> None:
    assert settings_for().mode is SpecMode.AUTO  # the default pair
    for name in load_registry().pairs:
        assert settings_for("-m", name).mode is SpecMode.AUTO, name


def test_a_draft_named_in_auto_mode_is_fetched_not_dropped(tiny_target: Path) -> None:
    """The pair's own draft is used in auto mode only if it is here; one the user named with
    --draft is fetched like the target (here --offline forbids it: an error, not a run
    without the draft)."""
    registry = Path(os.environ["XDG_CONFIG_HOME"]) / "localspec" / "models.toml"
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry.write_text('[models.far-draft]\nrepo = "someone/far"\nfile = "far.gguf"\n')
    args = build_parser().parse_args(
        ["complete", "--target", str(tiny_target), "--draft", "far-draft", "--offline"]
    )
    with pytest.raises(LocalspecError, match="offline"):
        model_files(args, draft_need(spec_settings(args)))
