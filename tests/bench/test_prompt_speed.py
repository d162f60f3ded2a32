"""`localspec bench prompt`: the prompts (their sizes, new every time), the turns the
contenders take, the editor's completions during a prompt (on a scripted server that makes
the order certain), and the command end to end against a real `localspec serve` on the tiny
model beside the llama-server stand-in. Counts and structure, never speed."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from localspec.bench.prompt_speed import (
    ALONE,
    WITH_EDITOR,
    PromptRun,
    PromptSpeedOptions,
    prompt_cases,
    prompt_tokens,
    prompt_with_editor,
    ratios,
    run_prompt_speed,
)
from localspec.cli import main
from tests.bench.test_llama_server import _fake_server, _llama_server

WAIT_S = 30.0  # only a broken bench waits this long: the scripted server hands over by events


def test_a_prompt_is_its_size_lead_first_and_taken_from_its_offset() -> None:
    text = list(range(100, 110))
    assert prompt_tokens(text, [1, 2], 6, offset=3) == [1, 2, 103, 104, 105, 106]
    assert prompt_tokens(text, [1], 5, offset=8) == [1, 108, 109, 100, 101]  # wraps around
    assert prompt_tokens(text, [1], 5, offset=18) == prompt_tokens(text, [1], 5, offset=8)
    with pytest.raises(ValueError, match="cannot follow"):
        prompt_tokens(text, [1, 2, 3], 3, offset=0)


class Scripted:
    """A server whose prompt is answered once `hold` completions were (none: at once); it
    tokenizes one id per character and records every body it was sent."""

    def __init__(self, name: str, hold: int = 0) -> None:
        self.name = name
        self.hold = hold
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self._completions = 0
        self._enough = threading.Event()
        self.fail_on_prompt: int | None = None  # the prompt that raises, counted from 1

    def request_json(self, path: str, body: dict[str, Any] | None, timeout: float) -> Any:
        assert body is not None
        if path == "/tokenize":
            return {"tokens": [ord(c) for c in body["content"]]}
        self.sent.append((path, body))
        assert path == "/completion" and body["cache_prompt"] is False
        if self.fail_on_prompt == len(self.sent):
            raise ConnectionResetError("the server went away")
        if self.hold:
            assert self._enough.wait(WAIT_S)
        n = len(body["prompt"])
        return {"content": "x", "timings": {"prompt_n": n, "cache_n": 0, "prompt_ms": n / 10}}

    def post(self, path: str, body: dict[str, Any] | None) -> tuple[Any, float]:
        assert path == "/infill" and body is not None
        self._completions += 1
        if self._completions >= self.hold:
            self._enough.set()
        return {"content": "", "timings": {"prompt_n": 3, "cache_n": 1}}, 0.01

    def log_tail(self, lines: int = 5) -> str:
        return "scripted log"


def test_the_editor_sends_completions_until_the_prompt_is_answered() -> None:
    """The prompt is answered once the first completion was; the next would go `every_s`
    later, but the wait ends as the prompt is answered: exactly one."""
    server = Scripted("s", hold=1)
    bodies = [{"input_prefix": "a"}, {"input_prefix": "b"}]
    reply, completions = prompt_with_editor(server, [1] * 40, bodies, every_s=WAIT_S, delay_s=0)
    assert reply.prompt_n == 40
    assert len(completions) == 1 and completions[0].prompt_n == 3


def test_contenders_alternate_and_every_prompt_is_new_to_them() -> None:
    first, second = Scripted("localspec"), Scripted("llama-server")
    options = PromptSpeedOptions(sizes=(64, 96), repeats=2, editor_every_s=0.0, editor_delay_s=0)
    runs: list[PromptRun] = []
    result = run_prompt_speed([first, second], "t" * 500, [{}], options, runs.append)
    assert result.runs == runs and result.skipped == []
    order = [(run.name, run.size, run.repeat, run.phase) for run in runs]
    assert order[:8] == [
        ("localspec", 64, 0, ALONE), ("llama-server", 64, 0, ALONE),
        ("localspec", 64, 0, WITH_EDITOR), ("llama-server", 64, 0, WITH_EDITOR),
        ("llama-server", 64, 1, ALONE), ("localspec", 64, 1, ALONE),
        ("llama-server", 64, 1, WITH_EDITOR), ("localspec", 64, 1, WITH_EDITOR),
    ]  # fmt: skip
    assert len(runs) == 16 and all(run.reply.prompt_n == run.size for run in runs)
    prompts = [tuple(body["prompt"]) for _path, body in first.sent]
    assert prompts == [tuple(body["prompt"]) for _path, body in second.sent]  # the same ones
    assert len(set(prompts)) == len(prompts) == 8  # each new
    assert len(set(p[:40] for p in prompts)) == 8  # and new from their start
    assert len(ratios(runs, "localspec", "llama-server", 96, ALONE)) == 2


def test_given_cases_are_the_ones_run_in_their_repeats_order() -> None:
    """`cases` (each repeat on servers started for it, its prompts tokenized once for all
    repeats): those prompts only, nothing tokenized again, the second repeat led by the
    other server."""
    options = PromptSpeedOptions(sizes=(64, 96), repeats=2)
    cases = prompt_cases(Scripted("tokenizer"), "t" * 500, options)
    second_repeat = [case for case in cases if case.repeat == 1]
    first, second = Scripted("localspec"), Scripted("llama-server")
    # no text: tokenizing it again would fail (a prompt cannot be cut from nothing)
    result = run_prompt_speed([first, second], "", [{}], options, cases=second_repeat)
    assert [(r.name, r.size, r.repeat) for r in result.runs] == [
        ("llama-server", 64, 1), ("localspec", 64, 1),
        ("llama-server", 96, 1), ("localspec", 96, 1),
    ]  # fmt: skip
    for server in (first, second):
        assert [body["prompt"] for _path, body in server.sent] == [
            list(case.tokens) for case in second_repeat
        ]


def test_a_failing_contender_is_dropped_saying_why() -> None:
    good, bad = Scripted("localspec"), Scripted("llama-server")
    bad.fail_on_prompt = 3
    options = PromptSpeedOptions(sizes=(64,), repeats=2, editor_every_s=0.0, editor_delay_s=0)
    result = run_prompt_speed([good, bad], "t" * 500, [{}], options)
    assert [run.name for run in result.runs].count("llama-server") == 2
    (skipped,) = result.skipped
    assert skipped.name == "llama-server" and "went away" in skipped.reason
    assert "scripted log" in skipped.reason
    assert [run.name for run in result.runs].count("localspec") == 4  # it went on alone


def _bench(target: Path, folder: Path, *extra: str) -> Any:
    out = folder / "prompt.json"
    code = main(
        [
            "bench", "prompt", "--target", str(target), "--ctx-size", "1024",
            "--threads", "1", "--modes", "off", "--sizes", "128,256", "--repeats", "2",
            "--json", str(out), *extra,
        ]
    )  # fmt: skip
    assert code == 0
    return json.loads(out.read_text())


def test_prompt_bench_against_localspec_and_a_llama_server_stand_in(
    tiny_target: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    binary, record = _fake_server(tmp_path, monkeypatch)
    doc = _bench(tiny_target, tmp_path, "--llama-server", str(binary), "--editor-every", "0")
    report = capsys.readouterr().out
    assert "128 tokens, alone: localspec / llama-server median " in report
    assert "256 tokens, with editor: localspec / llama-server median " in report
    assert "skipped" not in report
    runs = doc["runs"]
    assert len(runs) == 2 * 2 * 2 * 2  # sizes, repeats, phases, servers
    # every prompt was processed whole by both: nothing came from a cache
    assert all(run["prompt_n"] == run["size"] for run in runs), runs
    assert {(r["size"], r["phase"]) for r in doc["ratios"]} == {
        (128, "alone"), (128, "with editor"), (256, "alone"), (256, "with editor"),
    }  # fmt: skip
    assert all(len(r["each"]) == 2 for r in doc["ratios"])
    assert doc["settings"]["llama_slots"] == 2 and doc["settings"]["editor_every_s"] == 0
    # each repeat on a llama-server started for it (a process's memory placement is luck)
    starts = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(starts) == 2
    for started in starts:
        assert started[started.index("-np") + 1] == "2"
        assert started[started.index("-c") + 1] == "1024"


def test_prompt_bench_alone_without_llama_server_says_so(
    tiny_target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-llama-server"
    doc = _bench(tiny_target, tmp_path, "--llama-server", str(missing))
    assert f"skipped llama-server: cannot run {missing} --help" in capsys.readouterr().out
    assert {run["phase"] for run in doc["runs"]} == {"alone"}
    assert {run["server"] for run in doc["runs"]} == {"localspec"}
    assert all(run["prompt_n"] == run["size"] for run in doc["runs"])
    assert doc["settings"]["llama_slots"] == 1


@pytest.mark.skipif(
    _llama_server() is None, reason="no llama-server binary (set LLAMA_SERVER or put it on PATH)"
)
def test_prompt_bench_against_a_real_llama_server(tiny_target: Path, tmp_path: Path) -> None:
    binary = _llama_server()
    assert binary is not None
    doc = _bench(tiny_target, tmp_path, "--llama-server", str(binary))
    theirs = [run for run in doc["runs"] if run["server"] == "llama-server"]
    assert len(theirs) == 4 and all(run["prompt_n"] == run["size"] for run in theirs)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--sizes", "64,2048", "--ctx-size", "1024"], "--sizes must lie between 64 and"),
        (["--modes", "draft:2"], "--modes of `bench prompt` is localspec's"),
    ],
)
def test_prompt_bench_refuses_what_it_cannot_run(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "prompt", *extra]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("sizes", "message"),
    [("32", "each size is 64 to 1048576 tokens, not 32"), ("4k", "is not comma-separated")],
)
def test_prompt_bench_sizes_are_numbers_of_tokens(
    sizes: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", "prompt", "--sizes", sizes])
    assert exited.value.code == 2 and message in capsys.readouterr().err
