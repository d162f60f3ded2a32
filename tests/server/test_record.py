"""`serve --record FILE`: the bodies of authorised generation requests, one JSON line each,
in a private file that is never a link."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

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


def test_a_link_is_refused_in_one_line(tiny_target: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text("")
    link = tmp_path / "record.jsonl"
    link.symlink_to(elsewhere)
    command = [LOCALSPEC, "serve", "--target", str(tiny_target), "--record", str(link)]
    done = subprocess.run(
        [*command, "--no-socket", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if "record" in line]
    assert len(errors) == 1 and "a link is refused" in errors[0], done.stderr
    assert elsewhere.read_text() == ""
