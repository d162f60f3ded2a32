"""`bench processes`: a `localspec complete` process per prompt, mode and repeat."""

from __future__ import annotations

import json
from pathlib import Path

from localspec.bench.processes import mode_orders
from tests.test_cli import localspec


def _workloads(path: Path) -> Path:
    rows = [
        {"id": "gen-a", "category": "generate", "prompt": "def add(a, b):"},
        {"id": "edit-b", "category": "edit", "prompt": "x = 1\ny = 2\nz = x + y\n"},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_each_run_is_its_own_complete_process(tiny_target: Path, tmp_path: Path) -> None:
    out = tmp_path / "processes.json"
    args: list[str | Path] = ["processes", "--target", tiny_target, "--ctx-size", "512"]
    args += ["--workloads", _workloads(tmp_path / "w.jsonl"), "--modes", "off,ngram,auto"]
    args += ["--repeats", "2", "--max-tokens", "24", "--profile", "--json", out]
    result = localspec("bench", *args)
    assert result.returncode == 0, result.stderr
    assert "[12/12]" in result.stderr
    assert "| edit | ngram |" in result.stdout and "| all | auto |" in result.stdout
    assert "| category | mode | wall s (median) | off wall / wall |" in result.stdout
    doc = json.loads(out.read_text())
    runs = doc["runs"]
    assert len(runs) == 12 and doc["settings"]["model_args"][:2] == ["--target", str(tiny_target)]
    # greedy answers are the same in every mode, here as text
    by_prompt: dict[str, set[bytes]] = {}
    for run in runs:
        by_prompt.setdefault(run["workload"], set()).add(bytes(run["tokens"]))
        assert run["details"]["wall_s"] > 0 and run["details"]["via"] == "in-process"
    assert all(len(texts) == 1 for texts in by_prompt.values())
    for repeat in (0, 1):
        for prompt in ("gen-a", "edit-b"):
            mine = [r for r in runs if r["workload"] == prompt and r["repeat"] == repeat]
            assert sorted(r["position"] for r in mine) == [0, 1, 2]
    assert set(doc["step_profile"]) == {"off", "ngram", "auto"}


def test_a_failing_process_is_reported_not_hidden(tiny_target: Path, tmp_path: Path) -> None:
    missing = tmp_path / "missing.gguf"
    args: list[str | Path] = ["processes", "--target", missing, "--repeats", "1"]
    args += ["--workloads", _workloads(tmp_path / "w.jsonl"), "--max-tokens", "4"]
    result = localspec("bench", *args)
    assert result.returncode == 2
    assert "no run finished" in result.stderr and "Traceback" not in result.stderr


def test_modes_are_complete_spec_names_and_include_off(tiny_target: Path) -> None:
    result = localspec("bench", "processes", "--target", tiny_target, "--modes", "auto,draft:4")
    assert result.returncode == 2 and "must include off" in result.stderr


def test_orders_are_shuffled_per_prompt_and_reproducible() -> None:
    orders = mode_orders(["off", "ngram", "auto"], 20, seed=3)
    assert all(sorted(order) == ["auto", "ngram", "off"] for order in orders)
    assert len({tuple(order) for order in orders}) > 1
    assert orders == mode_orders(["off", "ngram", "auto"], 20, seed=3)
