"""`localspec bench concurrency`: the timing of a chat stream, the editor's answers marked by
whether the chat still streamed (on scripted servers that make the order certain), and the
command end to end against a real `localspec serve` on the tiny model beside the llama-server
stand-in. Counts and structure, never speed."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from localspec.bench.concurrency import (
    CHAT_PATH,
    CONTEXT_MARK_CHARS,
    ConcurrencyOptions,
    fresh_context,
    read_chat,
    run_both,
    run_concurrency,
)
from localspec.bench.editor import localspec_command
from localspec.bench.editor_session import SourceFile, editor_session
from localspec.bench.llama_vim import WARMUP
from localspec.cli import main
from localspec.loading import RuntimeSettings
from localspec.observe.history import History, default_history_path
from tests.bench.test_editor_bench import SMALL
from tests.bench.test_llama_server import _fake_server, _llama_server

WAIT_S = 30.0  # only a broken bench waits this long: the scripted servers hand over by events
FIMS = 3


def _content(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text}}]}


def _infill_answer() -> dict[str, Any]:
    return {"content": "", "timings": {"prompt_n": 5, "cache_n": 1}}


class Scripted:
    """A server whose chat and completions hand over by events, so that the order in which
    answers come back is certain: `serial` answers a completion only after the chat's last
    chunk (one request at a time); otherwise the chat holds its rest until every completion
    was answered."""

    def __init__(self, name: str = "scripted", *, serial: bool, fims: int = FIMS) -> None:
        self.name = name
        self.serial = serial
        self.fims = fims
        self.posted: list[str] = []
        self.fail_on: int | None = None  # the posted request that raises, counted from 1
        self._answered = 0
        self._fims_done = threading.Event()
        self._chat_done = threading.Event()
        self._chat_done.set()  # no chat running yet

    def post(self, path: str, body: dict[str, Any] | None) -> tuple[Any, float]:
        self.posted.append(path)
        if self.fail_on == len(self.posted):
            raise ConnectionResetError("the server went away")
        if self.serial:
            assert self._chat_done.wait(WAIT_S)
        self._answered += 1
        if self._answered == self.fims:
            self._fims_done.set()
        return _infill_answer(), 0.01

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[Any]:
        assert path == CHAT_PATH and body["stream"] is True
        self._answered = 0
        self._fims_done.clear()
        self._chat_done.clear()
        yield {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
        yield _content("def")
        if not self.serial:
            assert self._fims_done.wait(WAIT_S)
        yield _content(" parse")
        yield {"choices": [], "usage": {"completion_tokens": 7}}
        yield "[DONE]"
        self._chat_done.set()  # once the client has read the last chunk

    def log_tail(self, lines: int = 5) -> str:
        return "scripted log"


def _stamped(chunks: list[Any], handed: list[float], asked: list[float]) -> Iterator[Any]:
    """The chunks, the clock read as each is handed over and as the reader asks for the next:
    the reader's own reading of chunk i lies between handed[i] and asked[i]."""
    for chunk in chunks:
        handed.append(time.perf_counter())
        yield chunk
        asked.append(time.perf_counter())


def test_a_chat_stream_is_timed_from_its_first_content_chunk() -> None:
    firsts = []
    chunks = [
        {"choices": [{"delta": {"role": "assistant", "content": ""}}]},
        _content("a"),
        _content("b"),
        {"choices": [{"delta": {}}], "timings": {"predicted_per_second": 9}},
        {"choices": [], "usage": {"completion_tokens": 5}},
        "[DONE]",
    ]
    handed: list[float] = []
    asked: list[float] = []
    sent = time.perf_counter()
    run = read_chat(_stamped(chunks, handed, asked), sent, lambda: firsts.append(1))
    assert firsts == [1]  # once, at the first chunk with content
    assert run.tokens == 5 and run.server_tokens_per_s == 9.0
    # the first token is chunk 1 (the role-only chunk 0 has no content), the decode runs from
    # chunk 1 to chunk 2 (the last with content), and the stream ends at `[DONE]`, chunk 5
    assert handed[1] - sent <= run.first_token_s <= asked[1] - sent
    assert handed[2] - asked[1] <= run.decode_s <= asked[2] - handed[1]
    assert handed[5] <= run.ended_at <= asked[5]
    counted = read_chat([_content("a"), _content("b"), "[DONE]"], 0.0, lambda: None)
    assert counted.tokens == 2 and counted.server_tokens_per_s is None  # no usage: chunks


@pytest.mark.parametrize(
    ("chunks", "message"),
    [
        ([_content("a"), {"error": {"message": "boom"}}], "the chat stream failed"),
        ([{"choices": [{"delta": {"content": ""}}]}, "[DONE]"], "had no content"),
    ],
)
def test_a_broken_chat_stream_is_an_error(chunks: list[Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        read_chat(chunks, 0.0, lambda: None)


def test_completions_answered_during_the_chat_are_marked() -> None:
    server = Scripted(serial=False)
    replies, streaming, chat = run_both(server, [{}] * FIMS, {"stream": True}, 0.0)
    assert len(replies) == FIMS and chat.tokens == 7
    # the chat's rest waits for the last completion, which may still be on its way back
    assert streaming[:-1] == [True] * (FIMS - 1)


def test_completions_a_serial_server_answers_after_the_chat_are_not() -> None:
    server = Scripted(serial=True)
    replies, streaming, _ = run_both(server, [{}] * FIMS, {"stream": True}, 0.0)
    assert len(replies) == FIMS and streaming == [False] * FIMS


class Prompted(Scripted):
    """A chat that is still processing its prompt (no content yet) until every completion
    was answered: a bench that waited for its first token would never send them."""

    def __init__(self, beside_the_editor: tuple[int, ...] = (1,)) -> None:
        """`beside_the_editor`: which chat requests (counted from 1) completions come with."""
        super().__init__(serial=False)
        self.contents: list[str] = []
        self.beside_the_editor = beside_the_editor

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[Any]:
        self.contents.append(body["messages"][0]["content"])
        self._answered = 0
        self._fims_done.clear()
        if len(self.contents) in self.beside_the_editor:
            assert self._fims_done.wait(WAIT_S)
        yield _content("def")
        yield "[DONE]"


def test_with_a_context_the_completions_go_while_the_chat_s_prompt_is_processed() -> None:
    server = Prompted()
    replies, streaming, chat = run_both(
        server, [{}] * FIMS, {"stream": True, "messages": [{"content": "x"}]}, 0.0,
        during_prompt=True,
    )  # fmt: skip
    assert len(replies) == FIMS and streaming == [True] * FIMS and chat.tokens == 1


def test_a_context_is_new_to_the_server_on_every_chat_request() -> None:
    requests = [r for r in editor_session(fim_requests=FIMS) if r.kind != WARMUP]
    server = Prompted(beside_the_editor=(3, 5))  # warm-up, alone, beside, alone, beside
    text = "\n".join(f"line {i}" for i in range(40))
    options = ConcurrencyOptions(chat_tokens=4, delay_s=0.0, repeats=2, context=text)
    result = run_concurrency([server], requests, options)
    assert len(result.rounds) == 2 and not result.skipped
    # the warm-up, then alone and during the editor in each repeat: five, no two sharing a start
    assert len(server.contents) == 5
    assert len({content.splitlines()[0] for content in server.contents}) == 5
    for content in server.contents:
        lines = content.splitlines()
        assert [line for line in lines if line.startswith("line ")] == text.splitlines()
        runs = content.split("# send")
        assert max(len(run) for run in runs) < CONTEXT_MARK_CHARS + 20
    # another run sends other texts: a server's disk prompt store must not serve them
    again = Prompted(beside_the_editor=(3, 5))
    run_concurrency([again], requests, options)
    assert not {c.splitlines()[0] for c in again.contents} & {
        c.splitlines()[0] for c in server.contents
    }


def test_fresh_context_marks_the_text_throughout() -> None:
    text = "\n".join(f"{i:03d}" + "x" * 96 for i in range(10))  # lines of 101 characters
    lines = fresh_context(text, "3").splitlines()
    assert lines[0] == "# send 3" and [line for line in lines if "#" not in line] == [
        *text.splitlines()
    ]
    # a mark after every fourth line: 4 x 101 characters reach 400
    assert [i for i, line in enumerate(lines) if line.startswith("# send 3.")] == [5, 10]
    assert lines[5] == "# send 3.3" and lines[10] == "# send 3.7"


def test_contenders_alternate_and_a_failing_one_is_dropped_saying_why() -> None:
    requests = [r for r in editor_session(fim_requests=FIMS) if r.kind != WARMUP]
    first, second = Scripted("first", serial=True), Scripted("second", serial=True)
    second.fail_on = 3 * FIMS + 1  # warm-up and repeat 1 (2 x FIMS); the 2nd repeat's first
    order: list[str] = []
    options = ConcurrencyOptions(chat_tokens=4, delay_s=0.0, repeats=3)
    result = run_concurrency(
        [first, second], requests, options, lambda what, name, _: order.append(f"{what} {name}")
    )
    assert [(r.name, r.repeat) for r in result.rounds] == [
        ("first", 0), ("second", 0), ("first", 1), ("first", 2),
    ]  # fmt: skip
    assert order[:2] == ["warm-up first", "warm-up second"]
    # the second went first in repeat 2, and failed there
    assert [line for line in order if line.startswith("repeat 2")] == [
        "repeat 2 editor first", "repeat 2 chat first", "repeat 2 both first",
    ]  # fmt: skip
    (skipped,) = result.skipped
    assert skipped.name == "second" and skipped.reason.startswith("repeat 2 failed: ")
    assert "the server went away" in skipped.reason and "scripted log" in skipped.reason
    for round_ in result.rounds:
        assert len(round_.fim_alone) == len(round_.fim_during) == len(round_.while_streaming)


def test_serve_gets_parallel_ubatch_and_prompt_hold_only_when_asked() -> None:
    settings = RuntimeSettings(target=Path("t.gguf"), n_ctx=512)
    assert "--parallel" not in localspec_command(settings, "off", 1, 8)
    assert "--ubatch-size" not in localspec_command(settings, "off", 1, 8)
    assert "--prompt-hold" not in localspec_command(settings, "off", 1, 8)
    held = localspec_command(settings, "off", 1, 8, prompt_hold=0.0)
    assert held[held.index("--prompt-hold") + 1] == "0"
    pieces = localspec_command(replace(settings, ubatch=64), "off", 1, 8)
    assert pieces[pieces.index("--ubatch-size") + 1] == "64"
    command = localspec_command(settings, "off", 1, 8, parallel=3)
    assert command[command.index("--parallel") + 1] == "3"


def _concurrency(target: Path, folder: Path, *extra: str) -> Any:
    """The bench on SMALL with 3 completions, 2 repeats, a 16-token chat; its --json."""
    source, out = folder / "small.py", folder / "concurrency.json"
    source.write_text(SMALL)
    code = main(
        [
            "bench", "concurrency", "--target", str(target), "--ctx-size", "2048",
            "--threads", "1", "--modes", "off", "--editor-file", str(source),
            "--fim-requests", str(FIMS), "--chat-tokens", "16",
            "--delay", "0", "--repeats", "2", "--json", str(out), *extra,
        ]
    )  # fmt: skip
    assert code == 0
    return json.loads(out.read_text())


def test_concurrency_bench_against_localspec_and_a_llama_server_stand_in(
    tiny_target: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    binary, record = _fake_server(tmp_path, monkeypatch)
    doc = _concurrency(tiny_target, tmp_path, "--llama-server", str(binary))
    captured = capsys.readouterr()
    report = captured.out
    for row in ("FIM median during chat", "FIM p95 alone", "chat tok/s with editor"):
        assert row in report
    assert "llama-server -np 3" in report and "skipped" not in report
    assert "localspec at or better than llama-server: FIM ratio " in report
    assert "warm-up" in captured.err  # progress goes to stderr
    assert doc["skipped"] == []
    assert doc["settings"]["parallel"] is None and doc["settings"]["llama_slots"] == 3
    assert doc["settings"]["fim_requests"] == FIMS and doc["settings"]["repeats"] == 2
    names = ["localspec", "llama-server"]
    assert [(r["name"], r["repeat"]) for r in doc["rounds"]] == [
        ("localspec", 0), ("llama-server", 0), ("llama-server", 1), ("localspec", 1),
    ]  # fmt: skip
    for round_ in doc["rounds"]:
        assert len(round_["fim_alone"]) == len(round_["fim_during"]) == FIMS
        assert len(round_["while_streaming"]) == FIMS
        for phase in ("chat_alone", "chat_during"):
            chat = round_[phase]
            assert 0 < chat["tokens"] <= 16 and chat["first_token_s"] > 0
            assert "tokens_per_s" in chat
        assert all(reply["seconds"] > 0 for reply in round_["fim_alone"] + round_["fim_during"])
    theirs = [r for r in doc["rounds"] if r["name"] == "llama-server"]
    assert all(r["chat_alone"]["tokens"] == 16 for r in theirs)  # the stand-in's usage chunk
    for name in names:
        summary = doc["summary"][name]
        assert summary["repeats"] == 2 and summary["fim_during"] == 2 * FIMS
        assert 0 <= summary["fim_while_streaming"] <= 2 * FIMS
        for figure in ("fim_alone_median_s", "fim_median_ratio", "chat_ratio"):
            assert set(summary[figure]) == {"median", "low", "high"}
        assert set(doc["targets"][name]) == {"fim_median_ratio_within", "chat_ratio_at_least"}
    assert set(doc["targets"]["localspec_at_or_better"]) == {"fim_median_ratio", "chat_ratio"}
    (started,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert started[started.index("-np") + 1] == "3" and "--kv-unified" in started
    assert started[started.index("-c") + 1] == "2048"


def test_concurrency_bench_with_a_context_and_a_second_localspec(
    tiny_target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--compare-ubatch` and `--compare-prompt-hold` start other localspec serves;
    `--chat-context` feeds the chat a file's text."""
    context = tmp_path / "context.py"
    context.write_text(SMALL)
    doc = _concurrency(
        tiny_target, tmp_path, "--llama-server", str(tmp_path / "none"), "--ubatch-size", "64",
        "--compare-ubatch", "32", "--compare-prompt-hold", "0",
        "--chat-context", str(context),
    )  # fmt: skip
    assert list(doc["summary"]) == ["localspec", "localspec -ub 32", "localspec --prompt-hold 0"]
    assert doc["settings"]["ubatch"] == 64 and doc["settings"]["compare_ubatch"] == 32
    assert doc["settings"]["compare_prompt_hold"] == 0
    assert doc["settings"]["context"] == str(context)
    heading = "after sending the request for a streaming chat answer carrying context.py"
    assert heading in capsys.readouterr().out
    for round_ in doc["rounds"]:
        assert round_["chat_during"]["tokens"] > 0 and len(round_["fim_during"]) == FIMS


def test_concurrency_bench_without_llama_server_says_so(
    tiny_target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-llama-server"
    doc = _concurrency(tiny_target, tmp_path, "--llama-server", str(missing))
    assert f"skipped llama-server: cannot run {missing} --help" in capsys.readouterr().out
    assert list(doc["summary"]) == ["localspec"] and "localspec_at_or_better" not in doc["targets"]
    expected = editor_session([SourceFile("small.py", SMALL)], fim_requests=FIMS)
    sent = [r for r in expected if r.kind != WARMUP]
    assert all(len(r["fim_alone"]) == len(sent) for r in doc["rounds"])


@pytest.mark.skipif(
    _llama_server() is None, reason="no llama-server binary (set LLAMA_SERVER or put it on PATH)"
)
def test_concurrency_bench_against_a_real_llama_server(tiny_target: Path, tmp_path: Path) -> None:
    binary = _llama_server()
    assert binary is not None
    doc = _concurrency(tiny_target, tmp_path, "--llama-server", str(binary))
    assert doc["skipped"] == []  # it started with -np 3 --kv-unified and answered every phase
    theirs = [r for r in doc["rounds"] if r["name"] == "llama-server"]
    assert len(theirs) == 2
    for round_ in theirs:
        for phase in ("chat_alone", "chat_during"):
            assert 0 < round_[phase]["tokens"] <= 16  # its usage chunk, or its chunks counted
        assert all(r["prompt_n"] + r["cache_n"] > 0 for r in round_["fim_during"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--modes", "draft:2"], "--modes of `bench concurrency` is localspec's"),
        (["--delay", "-1"], "--delay at least 0"),
        (
            ["--parallel", "1", "--compare-prompt-hold", "0"],
            "--compare-prompt-hold needs --parallel 2 or more",
        ),
    ],
)
def test_concurrency_bench_refuses_what_it_cannot_run(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "concurrency", *extra]) == 2
    assert message in capsys.readouterr().err


def test_bench_servers_never_fall_back_and_keep_no_history_unless_watched() -> None:
    settings = RuntimeSettings(target=Path("t.gguf"), n_ctx=512)
    plain = localspec_command(settings, "auto", 1, 8)
    assert "--no-guard" in plain and "--no-history" in plain and "--metrics" not in plain
    watched = localspec_command(settings, "auto", 1, 8, watch=True)
    assert "--no-guard" in watched and "--metrics" in watched and "--no-history" not in watched


def test_a_watched_concurrency_bench_leaves_its_history_and_last_metrics_scrape(
    tiny_target: Path, tmp_path: Path
) -> None:
    scrape = tmp_path / "metrics.txt"
    _concurrency(tiny_target, tmp_path, "--watch", str(scrape))
    routes = {
        sample.labels["route"]: sample.value
        for family in text_string_to_metric_families(scrape.read_text())
        for sample in family.samples
        if sample.name == "localspec_requests_total"
    }
    assert set(routes) == {"infill", "chat"}
    assert routes["infill"] >= 2 * 2 * FIMS  # alone and during the chat, in both repeats
    assert routes["chat"] >= 2 * 2  # alone and with the editor, in both repeats
    with History(default_history_path()) as history:
        rows = {(row.route, row.requests) for row in history.summary(days=2)}
    assert rows == {(route, int(count)) for route, count in routes.items()}
