"""Pair compatibility from vocabularies: same tokens, same special tokens, a chat template."""

from __future__ import annotations

from pathlib import Path

from localspec.models.compat import pair_problems
from tests.tiny_models import corrupt_copy


def test_same_family_pair_is_compatible(tiny_target: Path, tiny_draft_noisy: Path) -> None:
    assert pair_problems(tiny_target, tiny_draft_noisy) == []


def test_renamed_token_is_reported(tiny_target: Path, tiny_draft_renamed_vocab: Path) -> None:
    problems = pair_problems(tiny_target, tiny_draft_renamed_vocab)
    assert len(problems) == 1 and "differ at token 260" in problems[0]


def test_unreadable_draft_is_reported(tiny_target: Path, tmp_path: Path) -> None:
    broken = corrupt_copy(tiny_target, tmp_path / "broken.gguf", "bad_magic")
    problems = pair_problems(tiny_target, broken)
    assert len(problems) == 1 and "not a GGUF file" in problems[0]
