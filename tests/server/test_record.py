"""`serve --record FILE`: the bodies of authorised generation requests, one JSON line each,
in a private file that is never a link."""

from __future__ import annotations

import itertools
import json
import logging
import os
import resource
import stat
import subprocess
from pathlib import Path

import pytest

from localspec.server.record import Recorder
from tests.server.conftest import LOCALSPEC, start_server


def test_generation_requests_are_recorded(
    server_env: None, tiny_target: Path, tmp_path: Path
) -> None:
    record = tmp_path / "session.jsonl"
    server = start_server(tiny_target, None, "--record", str(record), "--spec", "off")
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    try:
        with server.tcp() as http:
            assert http.post("/v1/chat/completions", json=chat).status_code == 200
            assert http.post("/tokenize", json={"content": "hi"}).status_code == 200
            assert http.post("/v1/messages", json={**chat, "model": "m"}).status_code == 200
        with server.tcp(auth=False) as stranger:  # refused before it is read: not recorded
            assert stranger.post("/v1/chat/completions", json=chat).status_code == 401
    finally:
        assert server.stop() == 0
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [line["path"] for line in lines] == ["/v1/chat/completions", "/v1/messages"]
    assert lines[0]["body"] == chat
    assert lines[0]["at"] <= lines[1]["at"]
    assert stat.S_IMODE(record.stat().st_mode) == 0o600


def _refused(target: Path, record: Path) -> str:
    """stderr of a `serve --record` that must stop before loading anything (a hang guard:
    a FIFO used to block the open until someone read it)."""
    command = [LOCALSPEC, "serve", "--target", str(target), "--record", str(record)]
    done = subprocess.run(
        [*command, "--no-socket", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "internal error" not in done.stderr and str(record) in done.stderr
    return done.stderr


def test_a_link_is_refused_in_one_line(tiny_target: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text("")
    link = tmp_path / "record.jsonl"
    link.symlink_to(elsewhere)
    assert "symbolic link" in _refused(tiny_target, link)
    assert elsewhere.read_text() == ""


def test_a_fifo_or_a_device_is_refused_in_one_line(tiny_target: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "record.fifo"
    os.mkfifo(fifo)
    assert "not a regular file" in _refused(tiny_target, fifo)
    assert "not a regular file" in _refused(tiny_target, Path("/dev/full"))


def test_a_hard_link_is_refused_and_its_other_name_left_alone(
    tiny_target: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("another file")
    elsewhere.chmod(0o644)
    linked = tmp_path / "record.jsonl"
    os.link(elsewhere, linked)
    assert "hard links" in _refused(tiny_target, linked)
    assert elsewhere.read_text() == "another file"
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o644


def test_odd_bodies_are_answered_as_without_recording(
    server_env: None, tiny_target: Path, tmp_path: Path
) -> None:
    """A lone surrogate is recorded as its escape (the server answers it with a 400, not a
    500); a body over --max-body is a 413 and not recorded; a file that was 0644 is 0600."""
    record = tmp_path / "session.jsonl"
    record.write_text("")
    record.chmod(0o644)
    server = start_server(
        tiny_target, None, "--record", str(record), "--spec", "off", "--max-body", "65536"
    )
    surrogate = b'{"messages": [{"role": "user", "content": "a\\ud800"}], "max_tokens": 2}'
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    try:
        assert stat.S_IMODE(record.stat().st_mode) == 0o600
        with server.tcp() as http:
            answer = http.post(
                "/v1/chat/completions",
                content=surrogate,
                headers={"Content-Type": "application/json"},
            )
            assert answer.status_code == 400, answer.text
            messages = http.post("/v1/messages", content=b'{"model": "m", ' + surrogate[1:])
            assert messages.status_code == 400, messages.text
            # 4 MiB of valid JSON, chunked: no length up front
            text = (b"x" * 65536 for _ in range(64))
            chunks = itertools.chain(
                [b'{"messages": [{"role": "user", "content": "'], text, [b'"}]}']
            )
            too_big = http.post("/v1/chat/completions", content=chunks)
            assert too_big.status_code == 413, too_big.text
            assert http.post("/v1/chat/completions", json=chat).status_code == 200
    finally:
        assert server.stop() == 0
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [line["path"] for line in lines] == [
        "/v1/chat/completions",
        "/v1/messages",
        "/v1/chat/completions",
    ]
    assert lines[0]["body"]["messages"][0]["content"] == "a\ud800"
    assert lines[2]["body"] == chat
    assert not [line for line in server.log if "Traceback" in line], server.log


def test_a_failing_write_is_logged_once_and_never_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk (here: a file size limit, EFBIG) costs the record, not the answers; the
    file keeps whole lines (the one cut short is cut off) and nothing more is written."""
    path = tmp_path / "session.jsonl"
    recorder = Recorder(path)
    recorder.write("/v1/chat/completions", b'{"first": 1}')
    kept = path.read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    body = json.dumps({"messages": [{"role": "user", "content": "x" * 4096}]}).encode()
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, hard))
    try:
        with caplog.at_level(logging.WARNING, logger="localspec.server.record"):
            for _ in range(3):
                recorder.write("/v1/chat/completions", body)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    recorder.write("/v1/chat/completions", b'{"later": 1}')
    recorder.close()
    warnings = [r for r in caplog.records if "cannot record" in r.getMessage()]
    assert len(warnings) == 1
    assert path.read_bytes() == kept and json.loads(kept)["body"] == {"first": 1}
