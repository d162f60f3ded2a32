"""The official `openai` client against a real server over TCP (with its bearer token)."""

from __future__ import annotations

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.server.conftest import Server


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.token, max_retries=0)


def test_models_lists_the_served_model(server: Server) -> None:
    ids = [model.id for model in client(server).models.list()]
    assert ids == ["target"]


def test_chat_completion_with_usage_and_speculative_statistics(server: Server) -> None:
    answer = client(server).chat.completions.create(
        model="target", messages=[{"role": "user", "content": "Say hi"}], max_tokens=12
    )
    choice = answer.choices[0]
    assert choice.message.role == "assistant"
    assert choice.finish_reason in ("stop", "length")
    assert answer.usage is not None
    assert answer.usage.completion_tokens >= 1
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens
    extra = answer.model_extra or {}
    assert extra["timings"]["predicted_n"] == answer.usage.completion_tokens
    assert extra["localspec"]["mode"] == "auto"
    assert "tuner_choices" in extra["localspec"]


def test_streamed_chat_equals_the_whole_answer(server: Server) -> None:
    """Greedy: the streamed deltas join to the non-streamed answer, then usage, then [DONE]."""
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Write a loop"}]
    api = client(server)
    whole = api.chat.completions.create(
        model="target", messages=messages, max_tokens=24, temperature=0
    )
    stream = api.chat.completions.create(
        model="target",
        messages=messages,
        max_tokens=24,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens  # type: ignore[union-attr]


def test_legacy_completions_streaming_and_stop(server: Server) -> None:
    api = client(server)
    whole = api.completions.create(model="target", prompt="def add(a, b):", max_tokens=16)
    assert whole.object == "text_completion"
    streamed = "".join(
        c.choices[0].text
        for c in api.completions.create(
            model="target", prompt="def add(a, b):", max_tokens=16, stream=True
        )
        if c.choices
    )
    assert streamed == whole.choices[0].text
    assert len(whole.choices[0].text) > 3  # else there would be no stop string to cut at
    stop = whole.choices[0].text[2:4]
    cut = api.completions.create(
        model="target", prompt="def add(a, b):", max_tokens=16, stop=[stop]
    )
    assert cut.choices[0].text == whole.choices[0].text.split(stop)[0]
    assert cut.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("spec", ["off", "ngram"])
def test_seeded_sampling_repeats(server: Server, spec: str) -> None:
    """A seed reproduces a sampled answer in modes whose verification draws one uniform per
    token as plain sampling does. (The draft model's p/q rule draws differently, so in auto
    mode the same seed gives an answer from the same distribution, not the same answer.)"""
    api = client(server)

    def sample() -> str | None:
        answer = api.chat.completions.create(
            model="target",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=16,
            temperature=0.9,
            top_p=0.95,
            seed=7,
            extra_body={"spec": spec},
        )
        return answer.choices[0].message.content

    assert sample() == sample()


def test_any_model_name_is_served(server: Server) -> None:
    """Agents send the names they were configured with (`--strict-model-names` refuses
    them: tests/server/test_model_names.py)."""
    answer = client(server).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], max_tokens=1
    )
    assert answer.choices[0].finish_reason in ("stop", "length")


def test_unsupported_options_are_refused_not_ignored(server: Server) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client(server).chat.completions.create(
            model="target", messages=[{"role": "user", "content": "hi"}], n=2
        )
    assert "'n'" in str(caught.value)


def test_wrong_api_key_is_401(server: Server) -> None:
    api = openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        api.models.list()


def test_completions_with_a_suffix_fill_in_the_middle(server: Server) -> None:
    """Continue and minuet send FIM as /v1/completions with `suffix`."""
    api = client(server)
    plain = api.completions.create(model="target", prompt="def f(x):\n    ", max_tokens=4)
    fim = api.completions.create(
        model="target", prompt="def f(x):\n    ", suffix="\n    return y\n", max_tokens=4
    )
    assert fim.choices[0].text is not None
    plain_prompt = (plain.model_extra or {})["localspec"]["prompt_tokens"]
    fim_prompt = (fim.model_extra or {})["localspec"]["prompt_tokens"]
    assert fim_prompt > plain_prompt  # FIM tokens, file header and the suffix
