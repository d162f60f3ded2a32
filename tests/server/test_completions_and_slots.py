"""`n_cmpl` (several completions of one prompt) and `id_slot` on /completion and /infill, as
llama-server answers them, over a real socket to the module's tiny-model server (three slots,
`serve`'s default)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.server.conftest import Server

PROMPT = "def total(values):\n    result = 0\n"
INFILL = {"input_prefix": PROMPT, "input_suffix": "\n    return result\n", "prompt": "    for "}


def _post(server: Server, path: str, body: dict[str, Any]) -> Any:
    with server.unix() as http:
        response = http.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize(
    ("path", "fields"), [("/completion", {"prompt": PROMPT}), ("/infill", INFILL)]
)
def test_n_cmpl_answers_an_array_in_index_order_from_one_cached_prompt(
    server: Server, path: str, fields: dict[str, Any]
) -> None:
    body = {**fields, "n_predict": 8, "temperature": 0.0, "n_cmpl": 3}
    answers = _post(server, path, body)
    assert isinstance(answers, list) and [a["index"] for a in answers] == [0, 1, 2]
    assert len({a["content"] for a in answers}) == 1  # greedy: the same completion three times
    first, *others = answers
    prompt_size = first["timings"]["prompt_n"] + first["timings"]["cache_n"]
    for other in others:  # the prompt is in the KV cache: at most its last token is processed
        assert other["timings"]["prompt_n"] + other["timings"]["cache_n"] == prompt_size
        assert other["timings"]["prompt_n"] <= 1


def test_one_completion_is_an_object_and_n_is_n_cmpls_alias(server: Server) -> None:
    single = _post(server, "/completion", {"prompt": PROMPT, "n_predict": 4, "n_cmpl": 1})
    assert isinstance(single, dict) and single["index"] == 0
    answers = _post(server, "/completion", {"prompt": PROMPT, "n_predict": 4, "n": 2})
    assert [a["index"] for a in answers] == [0, 1]


def test_each_next_completion_takes_the_next_seed(server: Server) -> None:
    # plain decoding: under `auto` the tuner may pick the draft model, whose min(1, p/q) rule
    # draws other random numbers than plain sampling, and it decides by measured speed
    sampled = {"prompt": PROMPT, "n_predict": 12, "temperature": 1.5, "spec": "off"}
    answers = _post(server, "/completion", {**sampled, "seed": 7, "n_cmpl": 3})
    alone = [_post(server, "/completion", {**sampled, "seed": seed}) for seed in (7, 8, 9)]
    assert [a["content"] for a in answers] == [a["content"] for a in alone]


@pytest.mark.parametrize(
    ("asked", "slot", "fresh"),
    [(0, 0, "import sys\n"), (4, 1, "while True:\n    pass\n"), (2, 2, "x = [1, 2]\n")],
)
def test_id_slot_is_taken_modulo_the_slot_count(
    server: Server, asked: int, slot: int, fresh: str
) -> None:
    # a prompt no slot holds: one that does would take it where its cache is instead (FIM
    # prompts of one project share their header)
    answer = _post(server, "/completion", {"prompt": fresh, "n_predict": 2, "id_slot": asked})
    assert answer["id_slot"] == slot


def test_any_slot_is_one_of_the_servers(server: Server) -> None:
    answer = _post(server, "/infill", {**INFILL, "n_predict": 2, "id_slot": -1})
    assert answer["id_slot"] in (0, 1, 2)
