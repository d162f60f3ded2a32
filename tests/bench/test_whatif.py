"""What-if replays of a real (tiny-model) benchmark: traces recorded by teacher forcing, the
results file and profile readers, and `localspec whatif` as the installed command."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from localspec.bench.contender import Prompt
from localspec.bench.profiles import ASSUMED_GPU, read_profile, shipped_profiles
from localspec.bench.whatif import (
    HINDSIGHT,
    ReplaySession,
    draft_predictions,
    predict,
    read_results,
    record_traces,
    replay_session,
)
from localspec.bench.workloads import Workload
from localspec.errors import UsageError
from localspec.loading import RuntimeSettings
from localspec.runtime import Runtime
from localspec.speculative.engine import Finished, GenerationRequest, SpecMode, SpecSettings
from localspec.speculative.simulate import AutoPolicy, Trace
from localspec.speculative.sources import EXTRA, SUFFIX, Span
from localspec.speculative.tuner import HardwareProfile
from tests.test_cli import localspec

CPU_LIKE = {"verify_s": [0.08, 0.13, 0.18, 0.23, 0.29], "draft_s": 0.04}


def greedy_answer(runtime: Runtime, prompt: list[int], tokens: int) -> list[int]:
    request = GenerationRequest(
        prompt, max_tokens=tokens, spec=SpecSettings(SpecMode.OFF), ignore_eos=True
    )
    finished = [e for e in runtime.generate(request) if isinstance(e, Finished)]
    return finished[0].tokens


@pytest.fixture(scope="module")
def exact_runtime(tiny_target: Path, tiny_draft_exact: Path) -> Iterator[Runtime]:
    settings = RuntimeSettings(target=tiny_target, draft=tiny_draft_exact, n_ctx=512, n_threads=1)
    with Runtime(settings) as runtime:
        runtime.load_draft()
        yield runtime


def test_an_identical_draft_agrees_with_every_greedy_token(exact_runtime: Runtime) -> None:
    prompt = exact_runtime.prompts.tokenize("def add(a, b):")
    answer = greedy_answer(exact_runtime, prompt, 100)  # more than one 64-row chunk
    assert exact_runtime.models.draft_context is not None
    agrees, confidence = draft_predictions(exact_runtime.models.draft_context, prompt, answer)
    assert len(agrees) == len(confidence) == len(answer) == 100
    assert all(agrees)
    assert all(0.0 < p <= 1.0 for p in confidence)


def test_traces_carry_the_category_and_draft_columns_only_with_a_draft(
    exact_runtime: Runtime,
) -> None:
    prompt = exact_runtime.prompts.tokenize("x = 1")
    answer = greedy_answer(exact_runtime, prompt, 20)
    prompts = [Prompt(Workload("w", "edit", prompt="x = 1"), prompt, "complete")]
    outputs = {"w": answer, "unused": [1, 2]}
    with_draft = record_traces(prompts, outputs, exact_runtime.models.draft_context)
    without = record_traces(prompts, outputs, None)
    assert [(t.category, t.route) for t in with_draft] == [("edit", "complete")]
    assert with_draft[0].output == tuple(answer) and all(with_draft[0].draft_agrees)
    assert without[0].draft_confidence == () and not any(without[0].draft_agrees)


def test_predictions_cover_every_policy_and_category_and_respect_hindsight() -> None:
    copy = tuple(range(100, 160))
    traces = [
        Trace(copy, copy, (True,) * 60, "edit", (0.95,) * 60),
        Trace((1, 2, 3), tuple(range(200, 260)), (False,) * 60, "generate", (0.3,) * 60),
    ]
    table = predict(traces, HardwareProfile.from_dict(CPU_LIKE))
    assert list(table) == ["edit", "generate", "all"]
    assert set(table["edit"]) == {
        "ngram", "draft:1", "draft:2", "draft:4", "draft:8", "hybrid", "auto",
        "auto+no-suffix", HINDSIGHT
    }  # fmt: skip
    for row in table.values():
        assert all(row[HINDSIGHT] >= value - 1e-9 for value in row.values()), row
    assert table["edit"][HINDSIGHT] > 1.25  # the whole answer is a copy of the prompt
    assert table["generate"][HINDSIGHT] == pytest.approx(1.0)  # nothing to copy, draft wrong
    gpu = predict(traces, ASSUMED_GPU)
    assert gpu["edit"]["draft:8"] > table["edit"]["draft:8"]  # cheap batches favour drafts


def test_auto_goes_on_from_what_earlier_answers_of_its_route_taught_it() -> None:
    """One tuner per route for the session, as the runtime keeps: the second copy is
    drafted from what the first taught, another route's starts afresh."""
    copy = tuple(range(100, 160))
    traces = [
        Trace(copy, copy, (False,) * 60, "edit", route=route)
        for route in ("complete", "complete", "infill")
    ]
    rows = replay_session(traces, HardwareProfile.from_dict(CPU_LIKE))
    first, second, other = (row["auto+no-suffix"] for row in rows)
    assert second > first  # it learned that these lookups are accepted
    assert other == pytest.approx(first)  # its own tuner, from the priors


def test_a_sessions_routes_keep_their_tuners_and_share_the_machines_costs() -> None:
    session = ReplaySession()
    make = partial(AutoPolicy, HardwareProfile.from_dict(CPU_LIKE))
    chat, infill = session.policy("auto", "complete", make), session.policy("auto", "infill", make)
    assert isinstance(chat, AutoPolicy) and isinstance(infill, AutoPolicy)
    assert chat.tuner is not infill.tuner and chat.tuner.costs is infill.tuner.costs
    assert session.policy("auto", "complete", make) is chat
    other = session.policy("auto+no-suffix", "complete", make)
    assert isinstance(other, AutoPolicy) and other.tuner.costs is not chat.tuner.costs


def test_without_recorded_draft_columns_draft_policies_are_left_out() -> None:
    trace = Trace((1, 2), (5, 6, 7), (False,) * 3, "json")
    policies = {"ngram", "auto", "auto+no-suffix", HINDSIGHT}
    assert set(predict([trace], ASSUMED_GPU)["json"]) == policies


def test_bad_files_get_one_line_errors(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    with pytest.raises(UsageError, match="not a `localspec bench --json` results file"):
        read_results(garbage)
    no_off = tmp_path / "no_off.json"
    no_off.write_text(
        json.dumps(
            {
                "settings": {"target": "t", "n_ctx": 1, "threads": 1, "max_tokens": 1},
                "runs": [{"mode": "ngram", "workload": "w", "tokens": [1]}],
            }
        )
    )
    with pytest.raises(UsageError, match="no `off` runs"):
        read_results(no_off)
    with pytest.raises(UsageError, match=r"missing\.json: no such file"):
        read_results(tmp_path / "missing.json")
    bad_profile = tmp_path / "profile.json"
    bad_profile.write_text(json.dumps({"verify_s": [0.1, -1.0]}))
    with pytest.raises(UsageError, match="positive seconds"):
        read_profile(bad_profile)
    bad_profile.write_text(json.dumps({"draft_s": 0.1}))
    with pytest.raises(UsageError, match="not a hardware profile"):
        read_profile(bad_profile)


def test_whatif_command_replays_a_bench_file(
    tiny_target: Path, tiny_draft_exact: Path, tmp_path: Path
) -> None:
    results = tmp_path / "bench.json"
    models: list[str | Path] = ["--target", tiny_target, "--draft", tiny_draft_exact]
    bench = localspec(
        "bench", *models, "--ctx-size", "2048", "--quick", "--modes", "off,auto", "--json", results
    )
    assert bench.returncode == 0, bench.stderr
    profile = tmp_path / "cpu.json"
    saved = localspec("tune", *models, "--ctx-size", "2048", "--save-profile", profile)
    assert saved.returncode == 0, saved.stderr
    record = json.loads(profile.read_text())
    assert {"machine", "models", "command", "measured", "llama_cpp_python"} <= set(record)
    assert record["models"]["target"] == tiny_target.name
    assert record["command"].startswith("localspec tune ") and record["catchup_s"] > 0
    out = tmp_path / "whatif.json"
    result = localspec("whatif", results, "--profile", profile, "--json", out)
    assert result.returncode == 0, result.stderr
    assert "predicted speed vs. plain decoding on this machine (calibrated)" in result.stdout
    assert f"on {profile} (localspec tune)" in result.stdout
    assert "| edit |" in result.stdout and "hindsight" in result.stdout
    predictions = json.loads(out.read_text())
    shipped = shipped_profiles()
    assert shipped and all(f"on {label}\n" in result.stdout for label in shipped)
    assert len(predictions) == 3 + len(shipped)  # this machine, shipped, assumed GPU, --profile
    for table in predictions.values():
        assert set(table) == {"edit", "generate", "explain", "json", "fim", "json-schema", "all"}
    # the identical draft agrees everywhere: on the example GPU drafting pays (auto first
    # catches the draft up on the prompt, as the runtime does), and no policy beats knowing
    # the answer on the fixed profiles (hindsight is greedy per step, not a proven optimum:
    # on a calibration measured on a loaded machine, with its odd costs, it need not be)
    gpu = next(t for name, t in predictions.items() if "assumed GPU (not measured" in name)
    assert gpu["all"]["auto"] > 1.5
    fixed = [t for name, t in predictions.items() if "shipped " in name or "assumed GPU" in name]
    assert len(fixed) == 1 + len(shipped)
    for table in fixed:
        for row in table.values():
            assert all(row["hindsight"] >= value - 1e-9 for value in row.values()), row


def test_every_shipped_profile_says_what_it_was_measured_on() -> None:
    for label, profile in shipped_profiles().items():
        assert "shipped " in label and "measured 20" in label, label
        assert profile.draft_s is not None and profile.catchup_s is not None, label
        assert len(profile.tie_noise) == len(profile.verify_s), label


def test_whatif_refuses_a_file_that_is_not_bench_results(tmp_path: Path) -> None:
    junk = tmp_path / "junk.json"
    junk.write_text("[]")
    result = localspec("whatif", junk)
    assert result.returncode == 2
    assert "not a `localspec bench --json` results file" in result.stderr


def test_traces_keep_a_fim_prompts_regions() -> None:
    """auto's replay looks up the suffix and extra chunks apart, as the runtime does."""
    regions = (Span(EXTRA, 1, 3), Span(SUFFIX, 4, 6))
    fim = Workload("f", "fim", prefix="a", suffix="b")
    prompts = [Prompt(fim, [1, 2, 3, 4, 5, 6, 7], "infill", regions)]
    [trace] = record_traces(prompts, {"f": [8, 9]}, None)
    assert trace.regions == regions and trace.category == "fim"


def test_the_suffix_store_carries_an_answer_to_the_next_trace_only() -> None:
    """The second request's answer is the first's, which its prompt does not hold: only the
    store (the session's earlier answers) can draft it, and it never drafts a trace's own."""
    answer = tuple(range(300, 360))
    traces = [
        Trace((1, 2, 3), answer, (False,) * 60, "first"),
        Trace((4, 5, 6), answer, (False,) * 60, "again"),
    ]
    table = predict(traces, HardwareProfile.from_dict(CPU_LIKE))
    assert table["first"]["auto"] == pytest.approx(table["first"]["auto+no-suffix"])
    assert table["first"][HINDSIGHT] == pytest.approx(1.0)
    assert table["again"]["auto+no-suffix"] == pytest.approx(1.0)  # nothing in its prompt
    assert table["again"]["auto"] > 1.15
    assert table["again"][HINDSIGHT] > 1.25
