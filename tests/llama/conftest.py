"""The small context most tests here use, over the tiny target (`model`, tests/conftest.py)."""

from collections.abc import Iterator

import pytest

from localspec.llama.context import LlamaContext
from localspec.llama.model import LlamaModel
from tests.llama.helpers import small_context


@pytest.fixture
def context(model: LlamaModel) -> Iterator[LlamaContext]:
    """A module's own `context` fixture takes its place where it needs another size."""
    with small_context(model) as ctx:
        yield ctx
