"""The `json-schema` category on tiny models: every localspec mode generates under the
workload's constraint, baselines that apply none skip those workloads, and the report gives
the masks' cost per token."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec.bench.modes import parse_modes
from localspec.bench.progress import Progress
from localspec.bench.report import format_report, summarise
from localspec.bench.runner import BenchOptions, run_bench
from localspec.bench.workloads import Workload, load_workloads
from localspec.errors import UsageError
from localspec.loading import RuntimeSettings
from localspec.runtime import Runtime, constraint_compiler

MODES = "off,ngram,auto,lcp-lookup:4"


@pytest.fixture(scope="module")
def runtime(tiny_target: Path, tiny_draft_noisy: Path) -> Iterator[Runtime]:
    settings = RuntimeSettings(target=tiny_target, draft=tiny_draft_noisy, n_ctx=1024, n_threads=1)
    with Runtime(settings) as loaded:
        yield loaded


def test_constrained_workloads_run_under_their_constraint_in_every_mode(runtime: Runtime) -> None:
    shipped = [w for w in load_workloads(None) if w.category == "json-schema"]
    assert {w.id for w in shipped} == {"schema-extract", "schema-config", "schema-tool-call"}
    workloads = [*shipped, Workload("plain", "edit", prompt="Rename x to y: x = 1")]
    options = BenchOptions(repeats=1, max_tokens=24)
    result = run_bench(runtime, workloads, parse_modes(MODES), options, Progress(io.StringIO()))
    by_mode = {mode: [s for s in result.samples if s.mode == mode] for mode in result.modes}
    assert {s.workload for s in by_mode["lcp-lookup:4"]} == {"plain"}
    [skipped] = [s for s in result.skipped if s.name == "lcp-lookup:4"]
    assert "applies no output constraint" in skipped.reason and "schema-config" in skipped.reason
    compiler = constraint_compiler(runtime.models.target_model)
    for workload in shipped:
        constraint = workload.output_constraint()
        assert constraint is not None
        runs = [s for s in result.samples if s.workload == workload.id]
        assert {s.mode for s in runs} == {"off", "ngram", "auto"}
        for sample in runs:
            assert sample.details["constraint"] == "json_schema"
            assert sample.details["masks"] >= len(sample.tokens)
            # what was generated is an allowed prefix (24 tokens rarely finish an object)
            guide = compiler.guide(constraint)
            assert guide.validate(sample.tokens) == len(sample.tokens)
    report = summarise(result.samples, result.modes)
    row = report["json-schema"]["auto"]
    assert row["mask_ms_per_token"] is not None and row["mask_ms_per_token"] > 0
    assert report["edit"]["off"]["mask_ms_per_token"] is None
    text = format_report(report, result.modes, result.skipped, result.rss_method)
    assert "constraint masks, ms per token (json-schema): off " in text
    assert "(edit)" not in text


def test_a_bad_constraint_is_refused_before_any_run(runtime: Runtime) -> None:
    bad = Workload("bad", "json-schema", prompt="x", constraint={"json_schema": {"type": "nope"}})
    with pytest.raises(UsageError, match=r"workload bad: the JSON schema .*Invalid type: nope"):
        run_bench(
            runtime,
            [bad],
            parse_modes("off"),
            BenchOptions(repeats=1, max_tokens=4),
            Progress(io.StringIO()),
        )
