"""A GGUF whose chat template is broken: one `ChatTemplateError` on every surface, never jinja's.

Each tiny model here is the usual one with another template written into the file, so the
template comes out of the GGUF through llama.cpp exactly as a downloaded model's would.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from localspec import Message, Runtime, RuntimeSettings
from localspec.errors import ChatTemplateError, UsageError
from tests.server.conftest import LOCALSPEC, start_server
from tests.tiny_models import CHAT_TEMPLATE, TinySpec, write_tiny_model

# the second line's expression is never closed: the template does not compile
UNCLOSED = "{% for message in messages %}\n{{ message['content'] }\n{% endfor %}"
# compiles, then reads a variable no renderer passes, on line 2
UNDEFINED = "{{ bos_token }}\n{{ tokenizer.config.prefix }}"
# the common deliberate refusal, on line 3
NO_SYSTEM = (
    "{% if messages[0]['role'] == 'system' %}\n\n"
    "{{ raise_exception('System role not supported') }}\n"
    "{% endif %}" + CHAT_TEMPLATE
)


def _model(folder: Path, name: str, template: str) -> Path:
    return write_tiny_model(folder / name, TinySpec(chat_template=template))


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("templates")
    return {
        "unclosed": _model(folder, "unclosed.gguf", UNCLOSED),
        "undefined": _model(folder, "undefined.gguf", UNDEFINED),
        "no-system": _model(folder, "no-system.gguf", NO_SYSTEM),
    }


def _error(model: Path, messages: list[Message]) -> ChatTemplateError:
    settings = RuntimeSettings(target=model, n_ctx=256, n_threads=1)
    with Runtime(settings) as runtime, pytest.raises(ChatTemplateError) as raised:
        runtime.prompts.chat_prompt(messages)
    return raised.value


@pytest.mark.parametrize(
    ("name", "problem", "line"),
    [
        ("unclosed", "unexpected '}'", 2),
        ("undefined", "'tokenizer' is undefined", 2),
        ("no-system", "System role not supported", 3),
    ],
)
def test_a_broken_template_names_the_model_the_problem_and_the_line(
    templates: dict[str, Path], name: str, problem: str, line: int
) -> None:
    error = _error(templates[name], [Message("system", "be brief"), Message("user", "hi")])
    assert (error.model, error.problem, error.line) == (templates[name].name, problem, line)
    message = str(error)
    assert message.startswith(f"{name}.gguf: its chat template failed (line {line}): {problem}")
    assert "a GGUF with a working template" in message
    # a usage error like a model without a template: a 400 from the server, exit code 2
    assert isinstance(error, UsageError) and error.exit_code == 2


def test_a_refusing_template_still_renders_what_it_accepts(templates: dict[str, Path]) -> None:
    settings = RuntimeSettings(target=templates["no-system"], n_ctx=256, n_threads=1)
    with Runtime(settings) as runtime:
        tokens = runtime.prompts.chat_prompt([Message("user", "hi")])
        expected = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        assert tokens == runtime.prompts.tokenize(expected)


def test_complete_prints_one_line_and_exits_2(templates: dict[str, Path]) -> None:
    done = subprocess.run(
        [LOCALSPEC, "complete", "--no-server", "--target", str(templates["unclosed"]), "hi"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "localspec: error: " + str(ChatTemplateError("unclosed.gguf", "unexpected '}'", 2))
    ]


def test_the_chat_endpoint_answers_400_and_the_server_keeps_serving(
    templates: dict[str, Path],
) -> None:
    server = start_server(templates["no-system"], None, "--spec", "off", auth=False)
    try:
        with server.unix() as http:
            chat = {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}
            refused = http.post("/v1/chat/completions", json={"messages": list(chat)})
            assert refused.status_code == 400
            error = refused.json()["error"]
            assert error["type"] == "invalid_request_error"
            assert error["message"].startswith(
                "no-system.gguf: its chat template failed (line 3): System role not supported"
            )
            answered = http.post(
                "/v1/chat/completions",
                json={"messages": [chat[1]], "max_tokens": 2},
            )
            assert answered.status_code == 200
    finally:
        assert server.stop() == 0
    assert not any("Traceback" in line for line in server.log)


# ten billion loop steps: without a budget, loading this model's conversation never ends
LOOPING = (
    "{% for i in range(100000) %}\n{% for j in range(100000) %}{% endfor %}{% endfor %}"
    + CHAT_TEMPLATE
)
# a hundred million characters of prompt, built in one expression or written chunk by chunk
HUGE_VALUE = "{{ 'x' * 100000000 }}" + CHAT_TEMPLATE
HUGE_OUTPUT = "{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}" + CHAT_TEMPLATE
DOUBLING = (
    "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}{{ ns.s }}" + CHAT_TEMPLATE
)


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        (LOOPING, "it ran past its budget (1000000 loop steps and calls"),
        (HUGE_VALUE, "it builds a value of 100000000 items"),
        (HUGE_OUTPUT, "its output passed 8000000 characters"),
        (DOUBLING, "it builds a value of 8388608 items"),
    ],
)
def test_a_template_past_its_budget_is_one_line_naming_the_model(
    tmp_path: Path, template: str, problem: str
) -> None:
    """Run as `complete` in a subprocess: without the budget it hangs (the timeout is only a
    hang guard) or exhausts the memory."""
    model = _model(tmp_path, "hostile.gguf", template)
    done = subprocess.run(
        [LOCALSPEC, "complete", "--no-server", "--target", str(model), "hi"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    # the output is measured outside the template's code: that failure has no line
    assert line.startswith("localspec: error: hostile.gguf: its chat template failed")
    assert problem in line
