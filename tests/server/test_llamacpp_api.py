"""llama.cpp's `/infill` and `/completion` over the Unix socket, as editor plugins call them."""

from __future__ import annotations

import json
import stat

import pytest

from tests.server.conftest import Server

RESPONSE_FIELDS = [
    "content",
    "timings/prompt_n",
    "timings/prompt_ms",
    "timings/prompt_per_token_ms",
    "timings/prompt_per_second",
    "timings/predicted_n",
    "timings/predicted_ms",
    "timings/predicted_per_token_ms",
    "timings/predicted_per_second",
    "truncated",
    "tokens_cached",
]

# The body llama.vim's llama#fim() sends (autoload/llama.vim), field for field.
LLAMA_VIM_FIELDS = {
    "id_slot": 0,
    "input_prefix": "def total(values):\n    result = 0\n",
    "input_suffix": "\n    return result\n",
    "input_extra": [
        {
            "text": "def mean(values):\n    return total(values) / len(values)\n",
            "time": 1.0,
            "filename": "stats.py",
        },
    ],
    "prompt": "    for ",
    "n_predict": 24,
    "stop": [],
    "n_indent": 4,
    "top_k": 40,
    "top_p": 0.90,
    "samplers": ["top_k", "top_p", "infill"],
    "stream": False,
    "cache_prompt": True,
    "t_max_prompt_ms": 500,
    "t_max_predict_ms": 1000,
    "response_fields": RESPONSE_FIELDS,
}


def test_socket_and_folder_are_private(server: Server) -> None:
    assert stat.S_IMODE(server.socket_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(server.socket_path.parent.stat().st_mode) == 0o700


def test_llama_vim_infill_request_gets_the_fields_it_reads(server: Server) -> None:
    with server.unix() as http:
        response = http.post("/infill", json=LLAMA_VIM_FIELDS)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) <= set(RESPONSE_FIELDS)
    for name in ("content", "timings/prompt_n", "timings/predicted_n", "tokens_cached"):
        assert name in body
    assert body["truncated"] is False
    assert isinstance(body["content"], str)
    assert body["tokens_cached"] >= body["timings/prompt_n"]


def test_infill_reports_drafts_and_reuses_the_prefix(server: Server) -> None:
    """With the exact draft, the draft model's tokens are all accepted; the second request
    around the same cursor only processes what changed."""
    request = {
        "input_prefix": "x = [1, 2, 3]\n",
        "input_suffix": "\nprint(y)\n",
        "prompt": "y = ",
        "n_predict": 16,
        "spec": {"mode": "draft", "draft_max": 4, "p_min": 0.0},
        "ignore_eos": True,
    }
    with server.unix() as http:
        first = http.post("/infill", json=request).json()
        second = http.post("/infill", json={**request, "prompt": "y = x"}).json()
    timings = first["timings"]
    assert timings["draft_n"] > 0
    assert timings["draft_n_accepted"] == timings["draft_n"]
    assert first["localspec"]["acceptance_rate"] == 1.0
    assert first["localspec"]["mean_acceptance_length"] > 1.0
    assert second["timings"]["cache_n"] > 0
    assert second["timings"]["prompt_n"] < first["timings"]["prompt_n"]


def test_a_drafting_budget_caps_the_drafts_and_the_answer_finishes(server: Server) -> None:
    """`spec.max_draft_tokens`: the request drafts at most that many tokens in all, then
    decodes plainly to its end; a negative time budget is refused with the field's name."""
    request = {
        "input_prefix": "x = [1, 2, 3]\n",
        "input_suffix": "\nprint(y)\n",
        "prompt": "y = ",
        "n_predict": 16,
        "spec": {"mode": "draft", "draft_max": 4, "p_min": 0.0, "max_draft_tokens": 5},
        "ignore_eos": True,
    }
    with server.unix() as http:
        answer = http.post("/infill", json=request).json()
        refused = http.post(
            "/infill", json={**request, "spec": {"mode": "draft", "max_draft_ms": -1}}
        )
    assert 0 < answer["timings"]["draft_n"] <= 5
    assert answer["timings"]["predicted_n"] == 16
    assert answer["localspec"]["draft_budget_spent"] is True
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "spec"
    assert "max_draft_ms" in refused.json()["error"]["message"]


def test_warm_up_request_only_caches(server: Server) -> None:
    """llama.vim sends n_predict 0 with the ring-buffer chunks to fill the cache."""
    warm = {
        "input_prefix": "",
        "input_suffix": "",
        "prompt": "",
        "n_predict": 0,
        "input_extra": [{"filename": "a.py", "text": "import os\n" * 20}],
    }
    with server.unix() as http:
        first = http.post("/infill", json=warm).json()
        again = http.post("/infill", json=warm).json()
    assert first["content"] == ""
    assert first["tokens_cached"] > 20
    assert again["timings"]["cache_n"] == again["tokens_cached"] - 1


def test_completion_streams_llama_cpp_events(server: Server) -> None:
    request = {"prompt": "int main(", "n_predict": 8, "ignore_eos": True, "temperature": 0}
    with (
        server.unix() as http,
        http.stream("POST", "/completion", json={**request, "stream": True}) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [
            json.loads(line[len("data: ") :])
            for line in response.iter_lines()
            if line.startswith("data: ")
        ]
    assert all(event["stop"] is False for event in events[:-1])
    final = events[-1]
    assert final["stop"] is True
    assert final["timings"]["predicted_n"] == 8
    assert final["content"] == ""  # as llama-server: the text is all in the pieces
    with server.unix() as http:
        whole = http.post("/completion", json=request).json()["content"]
    assert "".join(e["content"] for e in events) == whole


def test_completion_accepts_token_ids(server: Server) -> None:
    with server.unix() as http:
        by_text = http.post("/completion", json={"prompt": "abc", "n_predict": 4}).json()
        tokens = by_text["localspec"]["prompt_tokens"]
        assert tokens >= 1
        bad = http.post("/completion", json={"prompt": [10**9], "n_predict": 4})
    assert bad.status_code == 400
    assert "token ids" in bad.json()["error"]["message"]


def test_return_tokens_gives_the_answer_s_token_ids(server: Server) -> None:
    request = {"prompt": "def add(a, b):", "n_predict": 8, "temperature": 0, "ignore_eos": True}
    with server.unix() as http:
        plain = http.post("/completion", json=request).json()
        answer = http.post("/completion", json={**request, "return_tokens": True}).json()
        assert plain["tokens"] == [] and len(answer["tokens"]) == 8
        text = http.post("/detokenize", json={"tokens": answer["tokens"]}).json()["content"]
    assert text == answer["content"] == plain["content"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("logit_bias", [[5, False]]),
        ("logit_bias", {"5": -100}),
        ("typical_p", 0.5),
        ("xtc_probability", 0.5),
        ("mirostat", 2),
        ("dry_multiplier", 0.8),
        ("n_probs", 5),
        ("post_sampling_probs", True),
    ],
)
def test_samplers_localspec_lacks_are_refused_not_dropped(
    server: Server, field: str, value: object
) -> None:
    request = {"prompt": "abc", "n_predict": 2}
    with server.unix() as http:
        for path, body in (
            ("/completion", request),
            ("/v1/completions", {"prompt": "abc", "max_tokens": 2}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ):
            refused = http.post(path, json={**body, field: value})
            assert refused.status_code == 400, (path, refused.text)
            assert f"'{field}' is not supported" in refused.json()["error"]["message"]


def test_their_neutral_values_are_served(server: Server) -> None:
    neutral = {
        "logit_bias": {},
        "typical_p": 1.0,
        "xtc_probability": 0.0,
        "mirostat": 0,
        "dry_multiplier": 0.0,
        "n_probs": 0,
        "post_sampling_probs": False,
    }
    with server.unix() as http:
        answer = http.post("/completion", json={"prompt": "abc", "n_predict": 2, **neutral})
    assert answer.status_code == 200, answer.text


def test_a_stop_string_is_reported_as_llama_server_does(server: Server) -> None:
    """`stop_type` "word" with the `stopping_word`, as llama-server says it; EOS is "eos"."""
    request = {"prompt": "def add(a, b):", "n_predict": 24, "temperature": 0, "ignore_eos": True}
    with server.unix() as http:
        free = http.post("/completion", json=request).json()
        text = free["content"]
        word = text[len(text) // 2 : len(text) // 2 + 3]
        assert len(word) == 3, text
        cut = http.post("/completion", json={**request, "stop": [word]}).json()
    assert (cut["stop_type"], cut["stopping_word"]) == ("word", word)
    assert cut["content"] == text[: text.index(word)]
    assert (free["stop_type"], free["stopping_word"]) == ("limit", "")


def test_repeat_last_n_is_read_from_the_request(server: Server) -> None:
    """0 turns the repeat penalty off, as in llama.cpp; a window that sees the repeats bites."""
    base = {"prompt": "ab ab ab ab ab ab", "n_predict": 16, "temperature": 0, "ignore_eos": True}
    with server.unix() as http:

        def text(**extra: object) -> str:
            return str(http.post("/completion", json={**base, **extra}).json()["content"])

        plain = text()
        assert text(repeat_penalty=3.0, repeat_last_n=0) == plain
        assert text(repeat_penalty=3.0, repeat_last_n=64) != plain
        assert text(repeat_penalty=3.0, repeat_last_n=-1) == text(repeat_penalty=3.0)
        bad = http.post("/completion", json={**base, "repeat_last_n": -2})
    assert bad.status_code == 400 and "repeat_last_n" in bad.text


def test_the_step_that_cuts_an_under_indented_line_is_the_last(server: Server) -> None:
    """`n_indent` ends the answer at the token that shows a line starting left of the cursor,
    as llama-server's check of each token does: no target step is decoded after it. A
    grammar makes the tiny model write the lines (one byte token each: no merge applies)."""
    request = {
        "input_prefix": "def f():\n",
        "input_suffix": "\n",
        "prompt": "  ",
        "n_predict": 30,
        "n_indent": 2,
        "grammar": 'root ::= "x\\n  y\\nzq" "q"*',
        "spec": "off",
        "temperature": 0,
    }
    with server.unix() as http:
        body = http.post("/infill", json=request).json()
    assert body["content"] == "x\n  y\n"
    assert body["stop_type"] == "limit"
    # x, \n, space, space, y, \n and the z that shows the line: seven steps, not eight
    assert body["timings"]["predicted_n"] == 7
    assert body["localspec"]["target_steps"] == 7
