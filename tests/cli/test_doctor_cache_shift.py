"""`doctor` asks llama.cpp whether the target's KV cache can shift (`serve --cache-reuse`)."""

from __future__ import annotations

import json
from pathlib import Path

from localspec.cli.doctor import cache_shift
from tests.cli.test_doctor import run


def test_a_llama_architecture_model_can_shift(tiny_target: Path) -> None:
    assert cache_shift(tiny_target) is True


def test_doctor_reports_nothing_without_an_installed_target() -> None:
    """The test's model cache is empty: no model to ask, and doctor says nothing of it."""
    result = run("doctor", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["cache_reuse"] is None
    assert "--cache-reuse" not in run("doctor").stdout
