"""The tiny target, loaded once per module, and the small context most tests here use."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec.llama.context import LlamaContext
from localspec.llama.model import LlamaModel
from tests.llama.helpers import small_context


@pytest.fixture(scope="module")
def model(tiny_target: Path) -> Iterator[LlamaModel]:
    with LlamaModel(tiny_target) as loaded:
        yield loaded


@pytest.fixture
def context(model: LlamaModel) -> Iterator[LlamaContext]:
    """A module's own `context` fixture takes its place where it needs another size."""
    with small_context(model) as ctx:
        yield ctx
