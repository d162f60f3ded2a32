"""The files bench and whatif read from the user (--profile, --results, agent traces,
--workloads, --editor-file) are bounded by the bytes read and parsed without crashing: an
endless device or JSON nested beyond the parser's depth is a one-line usage error."""

from __future__ import annotations

import resource
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from localspec.bench.agent import load_trace
from localspec.bench.profiles import read_profile
from localspec.bench.whatif import read_results
from localspec.bench.workloads import load_workloads
from localspec.cli.bench_editor import session_files
from localspec.errors import UsageError

READERS: dict[str, Callable[[Path], Any]] = {
    "whatif --profile": read_profile,
    "whatif --results": read_results,
    "bench agent TRACE": load_trace,
    "bench --workloads": load_workloads,
    "bench editor --editor-file": session_files,
}


@pytest.fixture
def little_memory() -> Iterator[None]:
    """Reading /dev/zero whole would take more than this: the test fails fast, not the
    machine."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.mark.parametrize("reader", READERS.values(), ids=READERS.keys())
def test_an_endless_file_is_refused_in_one_line(
    reader: Callable[[Path], Any], little_memory: None
) -> None:
    with pytest.raises(UsageError, match="is more than") as refused:
        reader(Path("/dev/zero"))
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("reader", READERS.values(), ids=READERS.keys())
def test_json_nested_too_deeply_is_a_usage_error(
    reader: Callable[[Path], Any], tmp_path: Path
) -> None:
    nested = tmp_path / "nested.json"
    nested.write_text("[" * 200_000 + "\n")
    if reader is session_files:  # any text is a source file: it is read, not parsed
        assert reader(nested)[0].text.startswith("[[[")
        return
    with pytest.raises(UsageError):
        reader(nested)
