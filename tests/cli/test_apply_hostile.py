"""`localspec complete --apply` given hostile edit targets, end to end: the real command, in a
real process, against an OpenAI-compatible endpoint on a real socket that answers with the
blocks a hostile (or confused) model could write. The tiny models never write a block, so the
endpoint plays the model's part; everything after the answer is the command's own. Each block
is refused in one line, the command exits 1 with no traceback, and nothing is written anywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.server.conftest import LOCALSPEC
from tests.test_edits import CALC, block
from tests.test_edits_hostile import files

HOSTILE = [
    ("~/.bashrc", "starts with ~"),
    ("a\0b.py", "holds a NUL byte"),
    ("n" * 300 + ".py", "over the 255 a file name may have"),
    ("pipe.txt", "pipe.txt is a FIFO, not a plain file"),
    ("../outside/secret.py", "is outside"),
    (".git/config", "is inside .git"),
    ("pkg/", "pkg/ is a folder: name a file"),
]


class _Model(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint whose every answer is the server's `answer`."""

    server: _Endpoint

    def do_GET(self) -> None:
        self._send("application/json", json.dumps({"data": [{"id": "scripted"}]}).encode())

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        chunks = [
            {"choices": [{"index": 0, "delta": {"content": self.server.answer}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ]
        events = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks)
        self._send("text/event-stream", (events + "data: [DONE]\n\n").encode())

    def _send(self, kind: str, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Endpoint(ThreadingHTTPServer):
    answer = ""


@pytest.fixture
def endpoint() -> Iterator[_Endpoint]:
    server = _Endpoint(("127.0.0.1", 0), _Model)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    (folder / "pkg").mkdir(parents=True)
    (folder / "calc.py").write_text(CALC)
    os.mkfifo(folder / "pipe.txt")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.py").write_text("TOKEN=1\n")
    return folder


def apply(
    endpoint: _Endpoint, cwd: Path, answer: str, *files: str
) -> subprocess.CompletedProcess[str]:
    """The command with `answer` for the model's, given `files` with --file."""
    endpoint.answer = answer
    url = f"http://127.0.0.1:{endpoint.server_address[1]}"
    server = ("--server", url, "--server-kind", "openai", "--api-key", "k")
    return subprocess.run(
        [LOCALSPEC, "complete", *server, *files, "--apply", "change my files"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard: a FIFO once blocked the command forever
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_every_hostile_block_is_one_line_and_nothing_is_written(
    endpoint: _Endpoint, project: Path
) -> None:
    before = files(project.parent)
    answer = "".join(f"{path}\n" + block("a\n", "b\n", None) for path, _ in HOSTILE)
    done = apply(endpoint, project, answer)
    assert done.returncode == 1, done.stderr
    assert done.stdout == answer  # the answer, as the command always prints it
    *errors, nothing = done.stderr.splitlines()
    assert nothing == "localspec: nothing was written"
    assert len(errors) == len(HOSTILE), done.stderr
    for number, (line, (_, problem)) in enumerate(zip(errors, HOSTILE, strict=True), 1):
        assert line.startswith(f"localspec: error: block {number} ("), line
        assert problem in line
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert files(project.parent) == before
    assert not (project / "~").exists()


def test_a_good_block_is_still_applied(endpoint: _Endpoint, project: Path) -> None:
    done = apply(endpoint, project, block("    return a + b\n", "    return b + a\n"))
    assert done.returncode == 0, done.stderr
    assert (project / "calc.py").read_text() == CALC.replace("a + b", "b + a")


@pytest.mark.parametrize("given", ["../outside/secret.py", ".git/config"])
def test_a_lenient_path_never_means_a_file_edits_may_not_go_to(
    endpoint: _Endpoint, project: Path, given: str
) -> None:
    """The placeholder path means the one file given, unless that file is outside the working
    folder or in .git: then it means nothing, and nothing is written."""
    (project / ".git").mkdir()
    (project / ".git" / "config").write_text("[core]\n")
    before = files(project.parent)
    answer = block("TOKEN=1\n", "TOKEN=2\n", f"path/to/{Path(given).name}")
    done = apply(endpoint, project, answer, "--file", given)
    assert done.returncode == 1, done.stderr
    assert "does not exist" in done.stderr and "assumed" not in done.stderr
    assert files(project.parent) == before


def test_a_lenient_reading_is_not_written_without_a_terminal_to_confirm_it(
    endpoint: _Endpoint, project: Path
) -> None:
    answer = block("return a + b\n", "return b + a\n", "path/to/calc.py")
    done = apply(endpoint, project, answer, "--file", "calc.py")
    assert done.returncode == 1, done.stderr
    assert "localspec: assumed: block 1 (answer line 3): path/to/calc.py names no file" in (
        done.stderr
    )
    assert "not confirmed" in done.stderr
    assert done.stderr.splitlines()[-1] == "localspec: nothing was written"
    assert (project / "calc.py").read_text() == CALC
