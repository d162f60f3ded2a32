"""`GET /metrics` (`serve --metrics`) from a real server on the tiny models, read with
`prometheus_client`'s parser and checked by `promtool check metrics` where it is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.server.conftest import Server, start_server, wait_until_idle

CODE = "def parse(text):\n    lines = text.splitlines()\n    return lines\n" * 3
JSON_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("/infill", {"input_prefix": CODE, "input_suffix": "\n", "n_predict": 8, "spec": "ngram"}),
    ("/completion", {"prompt": CODE, "n_predict": 8, "spec": {"mode": "draft", "p_min": 0}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": CODE}], "max_tokens": 8}),
    (
        "/v1/messages",
        {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": CODE}]},
    ),
    (
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "a number"}],
            "max_tokens": 8,
            "response_format": {"type": "json_schema", "json_schema": {"schema": JSON_SCHEMA}},
        },
    ),
]


@pytest.fixture(scope="module")
def metered(server_env: None, tiny_target: Path, tiny_draft_exact: Path) -> Iterator[Server]:
    running = start_server(tiny_target, tiny_draft_exact, "--ctx-size", "1024", "--metrics")
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def scraped(metered: Server) -> str:
    with metered.unix() as http:
        for path, body in REQUESTS:
            response = http.post(path, json=body)
            assert response.status_code == 200, response.text
        wait_until_idle(metered)  # the worker lets go of the last job after its answer
        response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return response.text


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def test_llama_server_series_count_what_was_done(scraped: str) -> None:
    samples = _samples(scraped)
    predicted = samples["llamacpp:tokens_predicted_total"][0][1]
    assert predicted == sum(
        v for _, v in samples["localspec_generated_tokens_total"]
    ) and predicted >= len(REQUESTS)
    assert samples["llamacpp:prompt_tokens_total"][0][1] > 0
    assert samples["llamacpp:n_decode_total"][0][1] > 0
    drafted = samples["llamacpp:spec_decode_num_draft_tokens_total"][0][1]
    accepted = samples["llamacpp:spec_decode_num_accepted_tokens_total"][0][1]
    assert drafted > 0 and 0 < accepted <= drafted  # the exact draft: drafts are accepted
    per_position = samples["llamacpp:spec_decode_num_accepted_tokens_per_pos_total"]
    assert sum(v for _, v in per_position) == accepted
    assert {labels["position"] for labels, _ in per_position} >= {"0"}
    assert samples["llamacpp:requests_processing"][0][1] == 0  # idle when scraped
    assert samples["llamacpp:requests_deferred"][0][1] == 0


def test_localspec_series_are_labelled_by_route_pair_mode_and_constraint(scraped: str) -> None:
    samples = _samples(scraped)
    requests = samples["localspec_requests_total"]
    routes = {labels["route"] for labels, _ in requests}
    assert routes == {"infill", "completion", "chat", "messages"}
    assert {labels["pair"] for labels, _ in requests} == {"target+draft-exact"}
    modes = {(labels["route"], labels["mode"]) for labels, _ in requests}
    assert {("infill", "ngram"), ("completion", "draft"), ("chat", "auto")} <= modes
    constraints = {(labels["route"], labels["constraint"]) for labels, _ in requests}
    assert constraints == {
        ("infill", "none"),
        ("completion", "none"),
        ("chat", "none"),
        ("chat", "json"),
        ("messages", "none"),
    }
    assert sum(v for _, v in requests) == len(REQUESTS)
    drafted = {
        (labels["route"], labels["source"])
        for labels, v in samples["localspec_drafted_tokens_total"]
        if v > 0
    }
    assert ("completion", "draft") in drafted
    ttft = [v for labels, v in samples["localspec_time_to_first_token_seconds_count"]]
    assert sum(ttft) == len(REQUESTS)
    queue = samples["localspec_queue_wait_seconds_count"]
    assert sum(v for _, v in queue) == len(REQUESTS)
    itl = samples["localspec_inter_token_latency_seconds_bucket"]
    assert any(labels["le"] == "+Inf" and v > 0 for labels, v in itl)
    assert "localspec_guard_fallbacks_total" not in samples  # nothing fell back


def _promtool(text: str) -> subprocess.CompletedProcess[str]:
    promtool = os.environ.get("LOCALSPEC_PROMTOOL") or shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian's prometheus package; .ci/run fetches it)")
    command = [promtool, "check", "metrics"]
    return subprocess.run(
        command, input=text, capture_output=True, text=True, timeout=60, check=False
    )


def test_promtool_accepts_the_exposition(scraped: str) -> None:
    """promtool passes localspec's own series as they are. llama-server's names carry a
    colon, which its linter reserves for recording rules (it says the same of llama-server's
    own /metrics): that lint, on those names, is the only thing it may say of the whole."""
    own = "\n".join(line for line in scraped.splitlines() if "llamacpp:" not in line) + "\n"
    result = _promtool(own)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "localspec_requests_total" in own
    result = _promtool(scraped)
    problems = (result.stdout + result.stderr).splitlines()
    assert problems, "promtool no longer flags llama-server's names: drop this exception"
    for problem in problems:
        assert problem.startswith("llamacpp:"), problem
        assert problem.endswith("metric names should not contain ':'"), problem


def test_health_says_metrics_are_on_and_a_server_without_them_says_how(
    metered: Server, server: Server
) -> None:
    with metered.unix() as http:
        assert http.get("/health").json()["metrics"] is True
    with server.unix() as http:
        assert http.get("/health").json()["metrics"] is False
        response = http.get("/metrics")
    assert response.status_code == 404
    assert "--metrics" in response.json()["error"]["message"]


def test_metrics_need_the_token_on_tcp(metered: Server) -> None:
    with metered.tcp(auth=False) as http:
        assert http.get("/metrics").status_code == 401
    with metered.tcp() as http:
        assert http.get("/metrics").status_code == 200
