"""Fixtures shared by the whole suite: tiny generated models and isolated user directories."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec.llama.model import LlamaModel
from localspec.models import load_registry
from localspec.models.pull import installed_path
from tests.tiny_models import PARTIAL_DRAFT_NOISE, TinySpec, write_tiny_model


@pytest.fixture(scope="session")
def tiny_models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny_models")


@pytest.fixture(scope="session")
def tiny_target(tiny_models_dir: Path) -> Path:
    return write_tiny_model(tiny_models_dir / "target.gguf", TinySpec(seed=0))


@pytest.fixture(scope="module")
def model(tiny_target: Path) -> Iterator[LlamaModel]:
    """The tiny target loaded, once per module (a module may load it otherwise: its own
    `model` fixture takes this one's place)."""
    with LlamaModel(tiny_target) as loaded:
        yield loaded


@pytest.fixture(scope="session")
def tiny_draft_exact(tiny_models_dir: Path) -> Path:
    """A separate file with the target's exact weights: every drafted token is accepted."""
    return write_tiny_model(tiny_models_dir / "draft-exact.gguf", TinySpec(seed=0, noise=0.0))


@pytest.fixture(scope="session")
def tiny_draft_noisy(tiny_models_dir: Path) -> Path:
    """The target's weights perturbed so that about half the greedy tokens agree."""
    spec = TinySpec(seed=0, noise=PARTIAL_DRAFT_NOISE)
    return write_tiny_model(tiny_models_dir / "draft-noisy.gguf", spec)


@pytest.fixture(scope="session")
def tiny_draft_renamed_vocab(tiny_models_dir: Path) -> Path:
    """Same vocabulary size as the target, one token spelled differently."""
    spec = TinySpec(seed=0, vocab_variant="renamed")
    return write_tiny_model(tiny_models_dir / "draft-renamed-vocab.gguf", spec)


@pytest.fixture(scope="session")
def pair_paths() -> tuple[Path, Path]:
    """The default pair's target and draft files, for the real-model tier (marker real_model).

    Looked up in the Hugging Face cache with huggingface_hub's paths as they were at import,
    before the per-test fixture below moves HF_HOME.
    """
    registry = load_registry()
    pair = registry.pairs[registry.default_pair]
    target = installed_path(registry.models[pair.target])
    draft = installed_path(registry.models[pair.draft])
    if target is None or draft is None:
        pytest.fail("the default pair is not in the Hugging Face cache: run `localspec pull`")
    return target, draft


@pytest.fixture(autouse=True)
def isolated_user_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point config, cache, data, state and runtime directories into the test's temporary folder.

    HF_HUB_CACHE is deliberately not redirected: the real-model tests load the Qwen pair from the
    hub cache that the user or CI filled, and setting it here would hide those files. Where it is
    unset, huggingface_hub falls back to $HF_HOME/hub, which this fixture does move, and it reads
    both variables once at import; real-model runs should therefore set HF_HUB_CACHE explicitly.
    """
    home = tmp_path / "user"
    for var, sub in (
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_CACHE_HOME", "cache"),
        ("XDG_DATA_HOME", "data"),
        ("XDG_STATE_HOME", "state"),
        ("XDG_RUNTIME_DIR", "runtime"),
        ("HF_HOME", "hf-home"),
    ):
        folder = home / sub
        folder.mkdir(parents=True)
        monkeypatch.setenv(var, str(folder))
    # The XDG spec requires the runtime directory to be private to the user.
    (home / "runtime").chmod(0o700)
    return home
