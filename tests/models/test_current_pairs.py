"""The current families in the shipped registry, and the rules every entry is held to.

An entry is verified only when its revision, size and SHA-256 were read from the Hub; the
shipped file must say `verified = false` otherwise. Pairs whose sides name different
tokenizers are refused when the registry loads, before anything is downloaded.
"""

from __future__ import annotations

import re
import tomllib
from importlib import resources

import pytest

from localspec.models import ModelEntry, RegistryError, load_registry
from localspec.models import registry as registry_module
from localspec.models.registry import user_registry_path


def shipped_toml() -> dict[str, dict[str, dict[str, object]]]:
    text = resources.files("localspec.models").joinpath("models.toml").read_text()
    return tomllib.loads(text)


def write_user_registry(body: str) -> None:
    user = user_registry_path()
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text(body)


def test_the_current_families_are_in_the_registry() -> None:
    registry = load_registry()
    assert {"qwen3-coder-30b-a3b", "qwen3-8b", "llama-3.1-8b"} <= set(registry.pairs)
    coder = registry.pairs["qwen3-coder-30b-a3b"]
    assert registry.models[coder.draft].repo == "QuantFactory/Qwen3-0.6B-GGUF"
    # gpt-oss has no same-tokenizer draft, Gemma 3's 4B and 1B differ in vocabulary size:
    # models to run alone, in no pair
    alone = {"gpt-oss-20b-q4_k_m", "gemma-3-4b-it-q4_k_m", "gemma-3-1b-it-q4_k_m"}
    assert alone <= set(registry.models)
    in_pairs = {name for pair in registry.pairs.values() for name in (pair.target, pair.draft)}
    assert not alone & in_pairs
    assert [name for name, entry in registry.models.items() if entry.mtp] == [
        "qwen3.6-27b-mtp-iq4_xs"
    ]


def test_every_shipped_entry_is_complete_or_says_it_is_not_verified() -> None:
    raw_models = shipped_toml()["models"]
    registry = load_registry()
    for name, raw in raw_models.items():
        entry = registry.models[name]
        assert entry.verified == (entry.complete and raw.get("verified", True)), name
        if not entry.complete:
            assert raw.get("verified") is False, f"{name} must say verified = false"
        if entry.sha256 is not None:
            assert re.fullmatch(r"[0-9a-f]{64}", entry.sha256), name
        assert entry.revision == "main" or entry.pinned, name
    verified = {name for name, entry in registry.models.items() if entry.verified}
    assert "qwen3-0.6b-q5_k_s" in verified


def test_every_shipped_pair_names_one_tokenizer_on_both_sides() -> None:
    registry = load_registry()
    for name, pair in registry.pairs.items():
        target, draft = registry.models[pair.target], registry.models[pair.draft]
        assert target.tokenizer is not None and target.tokenizer == draft.tokenizer, name


def test_a_pair_across_tokenizers_is_refused_at_load() -> None:
    """Qwen3's thinking and tool tokens are not in Qwen2.5's vocabulary: same size, other ids."""
    write_user_registry(
        '[pairs.mixed]\ntarget = "qwen2.5-coder-7b-instruct-q4_k_m"\ndraft = "qwen3-0.6b-q5_k_s"\n'
    )
    with pytest.raises(RegistryError, match=r"pair 'mixed'.*qwen2\.5 tokenizer.*uses qwen3"):
        load_registry()


def test_a_pair_across_vocabulary_sizes_is_refused_at_load() -> None:
    """Gemma 3 4B lists 64 tokens more than 1B: the token-by-token check would refuse them."""
    write_user_registry(
        '[pairs.gemma]\ntarget = "gemma-3-4b-it-q4_k_m"\ndraft = "gemma-3-1b-it-q4_k_m"\n'
    )
    with pytest.raises(RegistryError, match=r"pair 'gemma'.*lists 262208 tokens.*lists 262144"):
        load_registry()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            '[models.a]\nrepo = "x/y"\nfile = "f.gguf"\nverified = true\n',
            "lacks a pinned 40-hex `revision`, `size`, `sha256`",
        ),
        ('[models.a]\nrepo = "x/y"\nfile = "f.gguf"\nverified = "no"\n', "`verified` must be"),
        ('[models.a]\nrepo = "x/y"\nfile = "f.gguf"\nmtp = 1\n', "`mtp` must be true or false"),
        ('[models.a]\nrepo = "x/y"\nfile = "f.gguf"\ntokenizer = ""\n', "`tokenizer` must be"),
        ('[models.a]\nrepo = "x/y"\nfile = "f.gguf"\nvocab_size = 0\n', "`vocab_size` must be"),
        ('[models.a]\nrepo = "x/y"\nfile = "f.gguf"\nsha256 = "x"\n', "`sha256` must be 64 hex"),
        ('[models.a]\npath = "a.gguf"\nverified = true\n', "`verified` is for Hub files"),
    ],
)
def test_promises_the_entry_cannot_keep_are_refused(body: str, message: str) -> None:
    write_user_registry(body)
    with pytest.raises(RegistryError, match=message):
        load_registry()


def test_a_user_entry_without_a_hash_is_simply_unverified() -> None:
    write_user_registry(
        '[models.mine]\nrepo = "x/y"\nfile = "f.gguf"\nmtp = true\ntokenizer = "qwen3"\n'
    )
    entry = load_registry().models["mine"]
    assert (entry.verified, entry.mtp, entry.tokenizer) == (False, True, "qwen3")


def test_the_shipped_file_must_say_verified_false(monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = registry_module._builtin_text()
    monkeypatch.setattr(
        registry_module,
        "_builtin_text",
        lambda: shipped + '\n[models.sloppy]\nrepo = "x/y"\nfile = "f.gguf"\n',
    )
    with pytest.raises(RegistryError, match=r"\[models\.'sloppy'\] lacks .*`verified = false`"):
        load_registry()


def test_an_entry_is_verified_only_when_it_can_be_checked() -> None:
    commit, digest = "a" * 40, "b" * 64
    assert ModelEntry("ok", "x/y", "f.gguf", commit, size=1, sha256=digest).verified
    assert not ModelEntry("unpinned", "x/y", "f.gguf", "main", size=1, sha256=digest).verified
    assert not ModelEntry("unsized", "x/y", "f.gguf", commit, sha256=digest).verified
    assert not ModelEntry("distrusted", "x/y", "f.gguf", commit, 1, digest, verified=False).verified
