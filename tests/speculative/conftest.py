"""Runtimes over the tiny target with a noisy (partial) or an exact (perfect) draft, one per
test module, as the engine's tests use them."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec import Runtime, RuntimeSettings


@pytest.fixture(scope="module")
def noisy(tiny_target: Path, tiny_draft_noisy: Path) -> Iterator[Runtime]:
    settings = RuntimeSettings(target=tiny_target, draft=tiny_draft_noisy, n_ctx=512, n_threads=1)
    with Runtime(settings) as runtime:
        yield runtime


@pytest.fixture(scope="module")
def exact(tiny_target: Path, tiny_draft_exact: Path) -> Iterator[Runtime]:
    settings = RuntimeSettings(target=tiny_target, draft=tiny_draft_exact, n_ctx=512, n_threads=1)
    with Runtime(settings) as runtime:
        yield runtime
