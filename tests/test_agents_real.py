"""Claude Code, Codex CLI and opencode on `localspec serve` with the real pair (marker real_model).

Each client runs a one-step task twice in a scratch repository, each time against a freshly
started server: the first run processes the agent's long prompt and stores its state on
disk, the second (a restarted server) restores it. The bar is the protocol: each client
exits cleanly, executes the tool call the server sent (its next request carries the tool's
result), and every request it sent was answered. What the 1.5B model answered is kept in the
transcripts (`$LOCALSPEC_AGENT_TRANSCRIPTS`, else the test's temporary folder), not judged.

The clients come from npm (`npm install @anthropic-ai/claude-code @openai/codex opencode-ai`):
`.ci/run` installs them and names their folder in `$LOCALSPEC_AGENT_BIN`; a client that is not
installed is skipped, saying so. Claude Code runs with `--tools Read` (its full tool list
makes an 18,600-token prompt, ~13 minutes of prompt processing on a 2-core CPU); Codex CLI
with web search and sub-agents off (a local server runs no hosted tools).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import Server, server_env, start_server

__all__ = ["server_env"]

pytestmark = pytest.mark.real_model

TASK = "Read hello.py and tell me the number it prints."
MODEL = "qwen2.5-coder-1.5b"
CLIENT_TIMEOUT_S = 1800  # a hang guard: a first run processes a 7,000-token prompt or more
SERVED = re.compile(
    r"localspec: (?P<path>\S+): prompt (?P<prompt>\d+) tokens \((?P<processed>\d+) processed"
    r"(?:, (?P<reused>\d+) reused(?: \((?P<restored>\d+) restored\))?)?\)"
)


def client_path(name: str) -> Path | None:
    folder = os.environ.get("LOCALSPEC_AGENT_BIN", "")
    found = shutil.which(name, path=os.pathsep.join([folder, os.environ.get("PATH", "")]))
    return Path(found) if found else None


@dataclass
class Run:
    """One client run: its exit code and output, the server's lines, the recorded requests."""

    code: int
    output: str
    served: list[dict[str, Any]]
    requests: list[dict[str, Any]]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("scratch-repo")
    (folder / "hello.py").write_text("print(6 * 7)\n")
    (folder / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    return folder


@pytest.fixture(scope="module")
def transcripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    kept = os.environ.get("LOCALSPEC_AGENT_TRANSCRIPTS")
    folder = Path(kept) if kept else tmp_path_factory.mktemp("agent-transcripts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def client_command(name: str, binary: Path) -> list[str]:
    """The client's command line (its configuration: `client_env`)."""
    if name == "claude":
        return [
            str(binary), "-p", TASK, "--tools", "Read", "--allowedTools", "Read",
            "--output-format", "json",
        ]  # fmt: skip
    if name == "codex":
        return [str(binary), "exec", "--skip-git-repo-check", TASK]
    return [str(binary), "run", "--model", f"localspec/{MODEL}", TASK]


def client_env(name: str, server: Server, home: Path, scratch: Path) -> dict[str, str]:
    # PWD too: opencode (Bun) takes its project folder from it, not from the process's cwd
    env = {**os.environ, "LOCALSPEC_TOKEN": server.token or "", "PWD": str(scratch)}
    if name == "claude":
        env.update(
            ANTHROPIC_BASE_URL=server.url,
            ANTHROPIC_API_KEY=server.token or "",
            # no ANTHROPIC_MODEL: Claude Code asks for its own models by name, and the
            # server answers them with its one model
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",  # no telemetry off this machine
            DISABLE_AUTOUPDATER="1",
            API_TIMEOUT_MS="3600000",
            CLAUDE_CONFIG_DIR=str(home),
        )
    elif name == "codex":
        (home / "config.toml").write_text(codex_config(server))
        env["CODEX_HOME"] = str(home)
    else:
        (scratch / "opencode.json").write_text(json.dumps(opencode_config(server)))
        env.update(OPENCODE_DISABLE_AUTOUPDATE="1", OPENCODE_DISABLE_MODELS_FETCH="1")
    return env


def codex_config(server: Server) -> str:
    """The least a provider needs (its web search and sub-agent tools left as they come:
    the server leaves hosted tools out and offers namespaced ones as functions), with no
    retries that would hide a failure, and an idle timeout a CPU's long prompt needs."""
    return f"""model = "{MODEL}"
model_provider = "localspec"

[model_providers.localspec]
name = "localspec"
base_url = "{server.url}/v1"
env_key = "LOCALSPEC_TOKEN"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
stream_idle_timeout_ms = 3600000
"""


def opencode_config(server: Server) -> dict[str, Any]:
    limit = {"context": 32768, "output": 2048}
    model = {"name": "Qwen2.5-Coder 1.5B", "tool_call": True, "limit": limit}
    options = {"baseURL": f"{server.url}/v1", "apiKey": "{env:LOCALSPEC_TOKEN}", "timeout": False}
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "localspec",
        "options": options,
        "models": {MODEL: model},
    }
    return {"provider": {"localspec": provider}, "model": f"localspec/{MODEL}"}


def run_once(
    name: str, binary: Path, pair: tuple[Path, Path], scratch: Path, *, folder: Path, home: Path
) -> Run:
    """A fresh server, one client run, the server stopped; everything kept in `folder`. The
    client's own folder, `home`, is the same for both runs, as a user's is (Claude Code's
    system prompt names it: another folder would be another prompt)."""
    folder.mkdir(parents=True, exist_ok=True)
    record = folder / "requests.jsonl"
    server = start_server(
        *pair, "--ctx-size", "32768", "--record", str(record), auth=True, threads=None
    )
    try:
        home.mkdir(exist_ok=True)
        done = subprocess.run(
            client_command(name, binary),
            cwd=scratch,
            env=client_env(name, server, home, scratch),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=CLIENT_TIMEOUT_S,
            check=False,
        )
    finally:
        assert server.stop() == 0
    output = done.stdout + done.stderr
    (folder / "transcript.txt").write_text(output)
    (folder / "server.log").write_text("\n".join(server.log))
    served = [m.groupdict() for line in server.log if (m := SERVED.match(line))]
    requests = [json.loads(line) for line in record.read_text().splitlines()]
    return Run(done.returncode, output, served, requests)


def carries_tool_result(request: dict[str, Any]) -> bool:
    """Whether a recorded request sends back a tool's result, in any of the three APIs."""
    body = request["body"]
    items = body.get("input") if request["path"] == "/v1/responses" else body.get("messages")
    for item in items if isinstance(items, list) else []:
        if item.get("role") == "tool" or item.get("type") == "function_call_output":
            return True
        content = item.get("content")
        if isinstance(content, list) and any(
            isinstance(part, dict) and part.get("type") == "tool_result" for part in content
        ):
            return True
    return False


@pytest.fixture(scope="module")
def pair(server_env: None, pair_paths: tuple[Path, Path]) -> Iterator[tuple[Path, Path]]:
    """The pair, in the module's own user folders: the two runs of a client share the
    prompt store and the calibration, as a user's restarted server does."""
    yield pair_paths


@pytest.mark.timeout(2 * CLIENT_TIMEOUT_S + 600)  # a hang guard: two runs, two server starts
@pytest.mark.parametrize("name", ["claude", "codex", "opencode"])
def test_a_client_runs_a_task_twice_the_second_time_from_disk(
    name: str, pair: tuple[Path, Path], scratch: Path, transcripts: Path
) -> None:
    binary = client_path(name)
    if binary is None:
        pytest.skip(f"{name} is not installed: npm install the clients (see .ci/run)")
    home = transcripts / f"{name}-home"
    runs = [
        run_once(name, binary, pair, scratch, folder=transcripts / f"{name}-{n}", home=home)
        for n in (1, 2)
    ]
    for run in runs:
        assert run.code == 0, run.output[-3000:]
        assert "API Error" not in run.output and '"is_error":true' not in run.output
        # every request the client sent was answered, and one carried a served call's result
        assert len(run.served) == len(run.requests) >= 2, run.output[-3000:]
        assert any(carries_tool_result(request) for request in run.requests), run.output[-3000:]
    # the restarted server found the long prefix on disk: a long prompt of the second run
    # processed only what the stored state did not hold
    restored = [
        served
        for served in runs[1].served
        if int(served["restored"] or 0) > 0
        and int(served["processed"]) < int(served["prompt"]) // 4
    ]
    assert restored, runs[1].served
