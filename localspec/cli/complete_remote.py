"""`complete` through a server: `localspec serve`, llama.cpp's llama-server, or any other
OpenAI-compatible endpoint (vLLM, SGLang, ...), read through `localspec.remote`.

localspec's server honours every option. llama-server honours all but the speculation
options (its own speculation is set when it starts). Another server gets OpenAI's fields
(and the sampling extensions vLLM and SGLang take, when they change something): a chat
prompt on `/v1/chat/completions`, `--raw` on `/v1/completions`; `--fim` needs llama.cpp's
`/infill`. What a server cannot honour is refused before anything is sent, never dropped.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from localspec.cli.arguments import given
from localspec.cli.constraint_args import constraint_fields, one_line
from localspec.cli.outcome import Outcome
from localspec.client import ServerRequestError
from localspec.errors import UsageError
from localspec.remote import RemoteServer, ServerKind
from localspec.speculative.events import TextChunk
from localspec.wire_schema import REQUEST, SAMPLING, SPECULATION, from_options

# the options not named after their field
_FLAGS = {"redecode_ties": "--no-redecode-ties", "suffix_drafts": "--no-suffix-drafts"}


def via_server(
    server: RemoteServer, args: argparse.Namespace, prompt: str, suffix: str | None
) -> Iterator[str | Outcome]:
    """The same generation on the server (chat, `/completion`, `/infill` or, on another
    server, `/v1/completions`), as text pieces and the outcome."""
    kind = server.kind
    refuse_unhonoured(server, args, suffix)
    # the options' fields (`wire_schema`); one left out is None: the server's own setting
    body = {**from_options(SAMPLING, args), **from_options(REQUEST, args)}
    if kind is ServerKind.LOCALSPEC:
        body[SPECULATION.nested] = from_options(SPECULATION, args)
    if suffix is None and not args.raw:
        messages = [{"role": "system", "content": args.system}] if args.system else []
        messages.append({"role": "user", "content": prompt})
        path = "/v1/chat/completions"
        body.update(messages=messages, max_tokens=args.max_tokens)
    elif suffix is None and kind is ServerKind.OPENAI:
        path = "/v1/completions"
        body.update(prompt=prompt, max_tokens=args.max_tokens)
    elif suffix is None:
        path = "/completion"
        body.update(prompt=prompt, n_predict=args.max_tokens)
    else:
        path = "/infill"
        body.update(input_prefix=prompt, input_suffix=suffix, n_predict=args.max_tokens)
    body.update(constraint_fields(args.constraint, chat=path == "/v1/chat/completions"))
    try:
        for event in server.events(path, body):
            if isinstance(event, TextChunk):
                if event.text:
                    yield event.text
            else:
                stats = {**event.stats.to_dict(), "via": str(server.address)}
                yield Outcome(event.finish_reason, stats)
    except ServerRequestError as exc:  # a bad --json-schema's reason spans lines
        raise ServerRequestError(one_line(str(exc)), exc.status) from exc


def refuse_unhonoured(server: RemoteServer, args: argparse.Namespace, suffix: str | None) -> None:
    """Options this kind of server cannot honour, refused in one line saying why."""
    kind = server.kind
    if kind is ServerKind.LOCALSPEC:
        return
    what = f"the server at {server.address} is {_described(kind)}"
    if suffix is not None and kind is ServerKind.OPENAI:
        raise UsageError(
            f"{what}: --fim needs llama.cpp's /infill (llama-server or `localspec serve`)"
        )
    if args.grammar is not None and kind is ServerKind.OPENAI:
        raise UsageError(f"{what}: --grammar is llama.cpp's; give the output a --json-schema")
    typed = given(args) | {flag for flag in _FLAGS if getattr(args, flag, None) is not None}
    speculation = [_flag(f.destination) for f in SPECULATION.fields if f.destination in typed]
    if speculation:
        raise UsageError(
            f"{what}, whose speculation is set when it starts: {', '.join(speculation)} "
            f"cannot apply there; leave them out"
        )


def _flag(destination: str) -> str:
    return _FLAGS.get(destination, "--" + destination.replace("_", "-"))


def _described(kind: ServerKind) -> str:
    if kind is ServerKind.LLAMA_CPP:
        return "llama.cpp's llama-server"
    return "not a localspec or llama.cpp server"
