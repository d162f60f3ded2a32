"""`localspec bench editor` end to end: a real `localspec serve` on the tiny model and the
llama-server stand-in, replaying a small session; counts and structure, never speed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from localspec.bench.editor import prepared, read_reply
from localspec.bench.editor_session import SourceFile, editor_session
from localspec.bench.llama_vim import WARMUP
from localspec.cli import main
from tests.bench.test_llama_server import _fake_server, _llama_server

SMALL = """def total(values):
    result = 0
    for value in values:
        result += value
    return result


def mean(values):
    count = len(values)
    if count == 0:
        raise ValueError("no values")
    return total(values) / count
"""


def _bench(target: Path, folder: Path, completions: int, *extra: str) -> int:
    """The bench on SMALL (written into `folder`), localspec with --spec off."""
    source = folder / "small.py"
    source.write_text(SMALL)
    return main(
        [
            "bench", "editor", "--target", str(target), "--ctx-size", "2048", "--threads", "1",
            "--modes", "off", "--editor-file", str(source), "--fim-requests", str(completions),
            *extra,
        ]
    )  # fmt: skip


def _bench_json(target: Path, folder: Path, completions: int, *extra: str) -> Any:
    """The bench's --json document."""
    out = folder / "editor.json"
    assert _bench(target, folder, completions, *extra, "--json", str(out)) == 0
    return json.loads(out.read_text())


def test_bodies_are_sent_greedy_without_sampler_chain_or_field_selection() -> None:
    (request, *_) = [r for r in editor_session(fim_requests=3) if r.kind != WARMUP]
    sent = prepared(request.body, t_max_prompt=False)
    assert "samplers" not in sent and "response_fields" not in sent
    assert "t_max_prompt_ms" not in sent
    assert sent["temperature"] == 0.0 and sent["seed"] == 0
    assert sent["input_prefix"] == request.body["input_prefix"]
    assert prepared(request.body, t_max_prompt=True)["t_max_prompt_ms"] == 500
    assert "samplers" in request.body  # the session's own body is left as llama.vim sends it


def test_a_reply_cut_by_t_max_prompt_ms_is_counted_as_cut() -> None:
    timings = {"prompt_n": 64, "cache_n": 10}
    cut = read_reply({"content": "", "timings": timings, "localspec": {"prompt_cut": True}}, 0.5)
    assert cut.cut and (cut.prompt_n, cut.cache_n, cut.seconds) == (64, 10, 0.5)
    assert not read_reply({"content": "x", "timings": timings}, 0.1).cut  # llama-server's
    with pytest.raises(ValueError, match="without timings"):
        read_reply({"content": ""}, 0.1)
    spent = {**timings, "prompt_ms": 900.5, "predicted_n": 7, "predicted_ms": 560.0}
    drafts = {**spent, "draft_n": 5, "draft_n_accepted": 3}
    reply = read_reply({"content": "x", "timings": drafts}, 1.6)
    assert (reply.prompt_ms, reply.predicted_n, reply.predicted_ms) == (900.5, 7, 560.0)
    assert (reply.draft_n, reply.draft_accepted) == (5, 3)


def test_with_t_max_prompt_ms_the_cut_answers_are_counted(
    tiny_target: Path, tmp_path: Path
) -> None:
    missing = str(tmp_path / "none")
    doc = _bench_json(tiny_target, tmp_path, 4, "--t-max-prompt-ms", "--llama-server", missing)
    assert doc["settings"]["t_max_prompt_ms"] is True
    replies = [r["replies"]["localspec"] for r in doc["requests"]]
    assert doc["summary"]["localspec"]["all"]["cut"] == sum(r["cut"] for r in replies)
    # what localspec processed while idle (after a cut) is read from /health, never guessed
    assert isinstance(doc["idle_tokens"]["localspec"], int) and doc["idle_tokens"]["localspec"] >= 0


def test_editor_bench_replays_against_localspec_and_a_llama_server_stand_in(
    tiny_target: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    binary, record = _fake_server(tmp_path, monkeypatch)
    doc = _bench_json(tiny_target, tmp_path, 6, "--llama-server", str(binary), "--numerics")
    report = capsys.readouterr().out
    assert "localspec" in report and "llama-server" in report and "skipped" not in report
    assert "shifted KV reuse" in report and "requests that shifted a chunk" in report
    assert "on every request, warm-ups and idle work included: processed" in report
    assert "localspec on completions: prompt " in report and "accepted" in report
    expected = editor_session([SourceFile("small.py", SMALL)], fim_requests=6)
    assert [r["kind"] for r in doc["requests"]] == [r.kind for r in expected]
    for sent, replayed in zip(expected, doc["requests"], strict=True):
        assert set(replayed["replies"]) == {"localspec", "llama-server"}
        ours, theirs = replayed["replies"]["localspec"], replayed["replies"]["llama-server"]
        assert ours["prompt_n"] + ours["cache_n"] > 0 and ours["seconds"] > 0
        body = sent.body
        chars = body["input_prefix"] + body["prompt"] + body["input_suffix"]
        chars += "".join(chunk["text"] for chunk in body["input_extra"])
        assert theirs["prompt_n"] == len(chars)  # the stand-in's reading of what was sent
    summary = doc["summary"]["localspec"]
    assert summary["completions"]["requests"] == 6
    assert summary["all"]["requests"] == len(expected)
    assert summary["all"]["processed"] == sum(
        r["replies"]["localspec"]["prompt_n"] for r in doc["requests"]
    )
    # the stand-in always answers nothing: localspec agrees where it answered nothing too
    empty = [r for r in doc["requests"] if r["kind"] != WARMUP]
    empty = [r for r in empty if r["replies"]["localspec"]["content"] == ""]
    assert doc["agreement"] == [len(empty), 6]
    assert doc["settings"]["n_ctx"] == 2048 and doc["skipped"] == []
    assert doc["numerics"]["requests"] == 6  # the completions' prompts, warm against cold
    (started,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert started[started.index("--cache-reuse") + 1] == "256"
    assert started[started.index("-b") + 1] == "1024"
    assert started[started.index("-c") + 1] == "2048"


def test_editor_bench_without_llama_server_says_so(
    tiny_target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-llama-server"
    assert _bench(tiny_target, tmp_path, 2, "--llama-server", str(missing)) == 0
    report = capsys.readouterr().out
    assert f"skipped llama-server: cannot run {missing} --help" in report


def test_editor_bench_modes_are_the_servers_spec(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "editor", "--modes", "draft:2"]) == 2
    assert "--modes of `bench editor` is localspec's --spec" in capsys.readouterr().err


@pytest.mark.skipif(
    _llama_server() is None, reason="no llama-server binary (set LLAMA_SERVER or put it on PATH)"
)
def test_editor_bench_against_a_real_llama_server(tiny_target: Path, tmp_path: Path) -> None:
    binary = _llama_server()
    assert binary is not None
    doc = _bench_json(tiny_target, tmp_path, 8, "--llama-server", str(binary))
    assert doc["skipped"] == []
    theirs = [r["replies"]["llama-server"] for r in doc["requests"]]
    assert all(reply["prompt_n"] + reply["cache_n"] > 0 for reply in theirs)
    assert any(reply["cache_n"] > 0 for reply in theirs)  # llama-server reused its cache
    assert doc["summary"]["llama-server"]["completions"]["requests"] == 8
    # the same prompts, in size: localspec builds llama-server's /infill layout. A warm-up
    # leaves its last token pending (processed by the completion that follows), so it
    # reports one token fewer than llama-server, which computes that token's logits too
    sizes = {
        name: [
            reply["prompt_n"] + reply["cache_n"] + (name == "localspec" and r["kind"] == WARMUP)
            for r in doc["requests"]
            for reply in [r["replies"][name]]
        ]
        for name in ("localspec", "llama-server")
    }
    assert sizes["localspec"] == sizes["llama-server"]
