"""The shipped registry, the user's file merged over it, and the errors bad files get."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from localspec.models import (
    RegistryError,
    UnknownModelError,
    load_registry,
    model_entry,
    pair_or_model,
)
from localspec.models.registry import user_registry_path
from tests.test_cli import localspec


def test_shipped_registry_has_the_default_pair_with_mirrors() -> None:
    registry = load_registry()
    pair = registry.pairs[registry.default_pair]
    target, draft = registry.models[pair.target], registry.models[pair.draft]
    assert target.repo == "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"
    assert target.pinned and target.size == 1_117_320_768 and target.sha256
    assert draft.size == 491_400_064 and draft.mirrors
    assert len(target.mirrors[0].packages) == 22
    # GPU users: larger Qwen targets with the 0.5B draft, and another family
    drafts = {p.draft for p in registry.pairs.values()}
    assert {"qwen2.5-coder-7b", "qwen2.5-coder-32b", "llama-3.1-8b"} <= set(registry.pairs)
    assert "llama-3.2-1b-instruct-q4_k_m" in drafts


def test_user_file_adds_and_overrides(tmp_path: Path) -> None:
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"GGUF")
    user = user_registry_path()
    user.parent.mkdir(parents=True)
    user.write_text(
        f"""
default_pair = "mine"
[models."my-target"]
path = "{gguf}"
[models."qwen2.5-coder-0.5b-instruct-q4_k_m"]
path = "relative.gguf"
[pairs."mine"]
target = "my-target"
draft = "qwen2.5-coder-0.5b-instruct-q4_k_m"
"""
    )
    registry = load_registry()
    assert registry.sources[-1] == user
    assert registry.default_pair == "mine"
    assert registry.models["my-target"].path == gguf
    # relative paths are relative to the user file; the shipped entry is replaced whole
    replaced = registry.models["qwen2.5-coder-0.5b-instruct-q4_k_m"]
    assert replaced.path == user.parent / "relative.gguf" and replaced.repo is None
    target, draft, pair = pair_or_model(None, registry)
    assert (target.name, draft and draft.name, pair and pair.name) == (
        "my-target",
        "qwen2.5-coder-0.5b-instruct-q4_k_m",
        "mine",
    )
    assert "qwen2.5-coder-1.5b-instruct-q4_k_m" in registry.models  # shipped ones remain


def test_bad_toml_reports_file_and_line(tmp_path: Path) -> None:
    user = user_registry_path()
    user.parent.mkdir(parents=True)
    user.write_text('default_pair = "x"\n[models.broken\nrepo = 1\n')
    with pytest.raises(RegistryError, match=rf"{user}: invalid TOML: .*line 2"):
        load_registry()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[models.a]\nrepo = "x/y"\n', "needs `repo` and `file`"),
        ('[models.a]\nrepo = "x/y"\nfile = "f.gguf"\nsizes = 3\n', "unknown keys \\['sizes'\\]"),
        ('[models.a]\nrepo = "x/y"\nfile = "f.gguf"\nsize = -1\n', "`size` must be a positive"),
        (
            '[models.a]\nrepo = "x/y"\nfile = "f.gguf"\n'
            'mirrors = [{kind = "pypi", packages = ["p"]}]\n',
            "a mirror needs a pinned 40-hex `revision`",
        ),
        ('[pairs.p]\ntarget = "nope"\ndraft = "nope"\n', "names unknown target 'nope'"),
        ('default_pair = "none-such"\n', "default_pair 'none-such' is not a pair"),
        ("colour = 1\n", "unknown top-level keys \\['colour'\\]"),
    ],
)
def test_inconsistent_entries_are_refused(body: str, message: str) -> None:
    user = user_registry_path()
    user.parent.mkdir(parents=True)
    user.write_text(body)
    with pytest.raises(RegistryError, match=message):
        load_registry()


def test_references_and_suggestions(tmp_path: Path) -> None:
    registry = load_registry()
    assert model_entry("qwen2.5-coder-7b-instruct-q4_k_m", registry).repo
    hub = model_entry("someone/x-GGUF/x.gguf@abc", registry)
    assert (hub.repo, hub.file, hub.revision) == ("someone/x-GGUF", "x.gguf", "abc")
    local = model_entry(str(tmp_path / "a.gguf"), registry)
    assert local.path == tmp_path / "a.gguf"
    with pytest.raises(UnknownModelError, match=r"did you mean 'qwen2\.5-coder-1\.5b'"):
        pair_or_model("qwen2.5-coder-1.5", registry)
    with pytest.raises(UnknownModelError, match="localspec models"):
        model_entry("zzzz", registry)


def test_a_registry_that_is_a_fifo_a_folder_or_not_text_is_one_line() -> None:
    """A FIFO would block every command at start-up; bytes that are not UTF-8 used to escape
    as an internal error."""
    user = user_registry_path()
    user.parent.mkdir(parents=True)
    os.mkfifo(user)
    result = localspec("doctor", "--json")  # a subprocess: the hang guard is its timeout
    assert result.returncode == 1, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert f"{user} is not a regular file: replace it with a TOML file" in line
    user.unlink()
    user.mkdir()
    with pytest.raises(RegistryError, match="is not a regular file"):
        load_registry()
    user.rmdir()
    user.write_bytes(b"\xff\xfe[models]\n")
    with pytest.raises(RegistryError, match=f"cannot read {user}: .*utf-8"):
        load_registry()
