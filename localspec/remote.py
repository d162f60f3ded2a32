"""Generation on a server: a running `localspec serve`, llama.cpp's llama-server, or any
OpenAI-compatible endpoint (vLLM, SGLang, ...), read as the engine's own events.

`RemoteServer.chat` yields `TextChunk`s and ends with `Finished` carrying `GenerationStats`,
as `Runtime.generate` does, so a surface has one event path wherever the models run.
Closing the generator (or `should_stop`) closes the connection, and the server cancels.

What each kind of server reports, and what becomes of it:
- localspec: each streamed chunk carries a `localspec` object with its engine step (`tokens`,
  `from_draft`, `drafted`, `source`), and the last one the generation's statistics: the
  events are the server's engine events.
- llama.cpp: speculation counts in the last chunk's `timings` (`draft_n`,
  `draft_n_accepted`); during the answer, as for any other server, each chunk counts as one
  token of unknown id (`UNKNOWN_TOKEN`) from an `UNREPORTED` source.
- openai (any other): no speculation figures (the statistics' mode is `UNREPORTED`), the
  prompt's size from `usage` once the answer is done.

The window comes from the server (localspec's `/v1/models` meta `n_ctx`, llama-server's
`/props`, vLLM's `max_model_len`) or, for a server that does not say, from the user
(`RemoteSettings.window`, `--ctx-size`). The prompt's size before a turn comes from
llama-server's `/apply-template` and `/tokenize`, which localspec's server speaks too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from localspec.client import (
    ServerAddress,
    ServerClient,
    ServerFailedError,
    ServerRequestError,
)
from localspec.errors import UsageError
from localspec.messages import Message
from localspec.remote_stats import UNKNOWN_TOKEN, UNREPORTED, Tally
from localspec.speculative.events import Event
from localspec.speculative.settings import SpecSettings
from localspec.wire_schema import GENERIC, REQUEST, SAMPLING, SPECULATION, requested

if TYPE_CHECKING:
    from localspec.speculative.sampling import SamplingSettings

PROBE_TIMEOUT_S = 5.0  # /v1/models and /props answer at once, even while a server generates
COUNT_TIMEOUT_S = 60.0  # tokenizing a long conversation on a busy server: a hang guard
__all__ = [
    "PROBE_TIMEOUT_S",
    "UNKNOWN_TOKEN",
    "UNREPORTED",
    "ChatRequest",
    "Conflict",
    "RemoteServer",
    "RemoteSettings",
    "Requirement",
    "Served",
    "ServerKind",
]


class ServerKind(StrEnum):
    LOCALSPEC = "localspec"
    LLAMA_CPP = "llama.cpp"
    OPENAI = "openai"


@dataclass(frozen=True)
class Conflict:
    """One option the server cannot honour: what was asked, and what the server runs."""

    asked: str  # "--ctx-size 8192"
    served: str  # "runs with --ctx-size 4096"


@dataclass(frozen=True)
class Requirement:
    """Something the user asked for that a server fixes when it starts: the value its `meta`
    must hold under `key` (`n_ctx`, `target`), as the user typed it (`asked`), what to say
    when the server does not report it, and how to say what it runs instead."""

    key: str
    value: Any
    asked: str
    unreported: str
    runs: Callable[[Any], str]

    def conflict(self, meta: Mapping[str, Any]) -> Conflict | None:
        if self.key not in meta:
            return Conflict(self.asked, self.unreported)
        if meta[self.key] != self.value:
            return Conflict(self.asked, self.runs(meta[self.key]))
        return None


def conflicts(requires: Sequence[Requirement], meta: Mapping[str, Any]) -> list[Conflict]:
    return [c for c in (r.conflict(meta) for r in requires) if c is not None]


def mismatch_error(address: ServerAddress, found: Sequence[Conflict]) -> UsageError:
    """The refusal of a server the user chose that cannot honour `found`."""
    runs = " and ".join(c.served for c in found)
    asked = ", ".join(c.asked for c in found)
    them = "it" if len(found) == 1 else "them"
    return UsageError(
        f"the server at {address} {runs}, so {asked} cannot apply there: leave {them} out, "
        f"restart the server with {them}, or pass --no-server"
    )


@dataclass(frozen=True)
class RemoteSettings:
    """Which server, what it is (None: a socket is localspec's, a URL is asked), the window
    of a server that does not report one, and what it must run (`connect` checks)."""

    address: ServerAddress
    kind: ServerKind | None = None
    window: int | None = None
    requires: tuple[Requirement, ...] = ()


@dataclass(frozen=True)
class Served:
    """What a server said about itself. `meta` holds what it reports in localspec's names
    (`n_ctx`, `target`, `draft`, load settings); `n_ctx` 0: the window is unknown."""

    kind: ServerKind
    model_id: str
    n_ctx: int = 0
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """A short name for the model: its file's stem, else its id's last part."""
        name = str(self.meta.get("target") or self.model_id or self.kind.value)
        return Path(name).stem if name.endswith(".gguf") else name.rsplit("/", 1)[-1]

    @property
    def has_draft(self) -> bool:
        return bool(self.meta.get("draft"))


@dataclass(frozen=True)
class ChatRequest:
    """One chat answer. `sampling` and `spec` None: the server's own defaults; `spec` is
    localspec's per-request speculation and reaches only a localspec server."""

    messages: Sequence[Message]
    max_tokens: int = 256
    sampling: SamplingSettings | None = None
    spec: SpecSettings | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False


class RemoteServer:
    """A server to generate on; what it is is asked once, on first need (`served`)."""

    def __init__(self, settings: RemoteSettings, timeout: float = 600.0) -> None:
        self.settings = settings
        self.address = settings.address
        self.client = ServerClient(settings.address, timeout)
        self._probe = ServerClient(settings.address, PROBE_TIMEOUT_S)
        self._count = ServerClient(settings.address, COUNT_TIMEOUT_S)
        self._served: Served | None = None

    @property
    def kind(self) -> ServerKind:
        if self.settings.kind is not None:
            return self.settings.kind
        if self.address.socket_path is not None:
            return ServerKind.LOCALSPEC  # localspec's transport: no need to ask
        return self.served.kind

    @property
    def served(self) -> Served:
        if self._served is None:
            self._served = self._ask()
        return self._served

    def connect(self) -> RemoteServer:
        """Ask the server what it runs; refuse it if that is not what was required."""
        found = self.conflicts()
        if found:
            raise mismatch_error(self.address, found)
        return self

    def conflicts(self) -> list[Conflict]:
        """What was required that this server does not run (or does not report)."""
        return conflicts(self.settings.requires, self.served.meta)

    @property
    def n_ctx(self) -> int:
        return self.served.n_ctx

    @property
    def counts(self) -> bool:
        """Whether the server measures prompts before an answer (`prompt_tokens`)."""
        return self.kind is not ServerKind.OPENAI

    def _ask(self) -> Served:
        kind = self.settings.kind
        listed = self._probe.get("/v1/models")
        entry = _first_model(listed)
        model_id = str(entry.get("id") or "")
        meta = entry.get("meta")
        if kind is ServerKind.LOCALSPEC or (
            kind is None and entry.get("owned_by") == "localspec" and isinstance(meta, dict)
        ):
            if not isinstance(meta, dict) or not isinstance(meta.get("n_ctx"), int):
                raise ServerFailedError(
                    f"the server at {self.address} does not report its models at /v1/models "
                    f"as localspec does: pass --server-kind openai"
                )
            return Served(ServerKind.LOCALSPEC, model_id, meta["n_ctx"], dict(meta))
        props = self._props() if kind in (None, ServerKind.LLAMA_CPP) else None
        if props is not None:
            return _llama_cpp_served(model_id, props, self.settings.window)
        if kind is ServerKind.LLAMA_CPP:
            raise ServerFailedError(
                f"the server at {self.address} has no llama.cpp /props: pass --server-kind openai"
            )
        reported = entry.get("max_model_len")  # vLLM's and SGLang's
        return _served(ServerKind.OPENAI, model_id, reported, {}, self.settings.window)

    def _props(self) -> Mapping[str, Any] | None:
        try:
            props = self._probe.get("/props")
        except ServerRequestError:  # not llama.cpp's
            return None
        settings = props.get("default_generation_settings") if isinstance(props, dict) else None
        return props if isinstance(settings, dict) else None

    # -- the prompt's size ----------------------------------------------------------------
    def apply_template(self, messages: Sequence[Message]) -> str:
        """The conversation as the server's chat template renders it (llama-server's
        `/apply-template`), without the BOS its tokenizer adds."""
        answer = self._count.post("/apply-template", {"messages": _wire_messages(messages)})
        prompt = answer.get("prompt") if isinstance(answer, dict) else None
        if not isinstance(prompt, str):
            raise self._unreadable("/apply-template")
        return prompt

    def tokenize(self, text: str, *, add_special: bool = True) -> list[int]:
        answer = self._count.post("/tokenize", {"content": text, "add_special": add_special})
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise self._unreadable("/tokenize")
        return tokens

    def detokenize(self, tokens: Sequence[int]) -> str:
        answer = self._count.post("/detokenize", {"tokens": list(tokens)})
        content = answer.get("content") if isinstance(answer, dict) else None
        if not isinstance(content, str):
            raise self._unreadable("/detokenize")
        return content

    def prompt_tokens(self, messages: Sequence[Message]) -> int | None:
        """The conversation's size in tokens, or None where the server cannot say before an
        answer (no `/apply-template`: any server but localspec's and llama.cpp's)."""
        if not self.counts:
            return None
        try:
            return len(self.tokenize(self.apply_template(messages)))
        except ServerRequestError as exc:
            if exc.status == 404:  # a llama-server older than /apply-template
                return None
            raise

    def _unreadable(self, path: str) -> ServerFailedError:
        return ServerFailedError(f"the server at {self.address} answered {path} unreadably")

    # -- generation -----------------------------------------------------------------------
    def chat(
        self, request: ChatRequest, should_stop: Callable[[], bool] | None = None
    ) -> Generator[Event, None, None]:
        """Stream one chat answer from `/v1/chat/completions` (see the module)."""
        body: dict[str, Any] = {
            "messages": _wire_messages(request.messages),
            "max_tokens": request.max_tokens,
            **requested(REQUEST, request),
        }
        if request.sampling is not None:
            body.update(requested(SAMPLING, request.sampling))
        if request.spec is not None:
            body[SPECULATION.nested] = requested(SPECULATION, request.spec)
        return self.events("/v1/chat/completions", body, should_stop)

    def events(
        self,
        path: str,
        body: Mapping[str, Any],
        should_stop: Callable[[], bool] | None = None,
    ) -> Generator[Event, None, None]:
        """Stream a generation as events: an OpenAI chat or text completion, or llama.cpp's
        `/completion` or `/infill`. `body` is written as for localspec: what another kind of
        server would not take is adapted (`wire_body`)."""
        kind = self.kind
        wire = wire_body(kind, {**body, "stream_options": {"include_usage": True}})
        if kind is ServerKind.OPENAI and self.served.model_id and "model" not in wire:
            wire["model"] = self.served.model_id  # vLLM and OpenAI want it
        # a localspec server's mode is the one asked for (or, left out, its own: "server")
        ours = kind is ServerKind.LOCALSPEC
        tally = Tally(_spec_mode(body) if ours else kind.value, kind.value)
        if should_stop is not None and should_stop():
            yield tally.cancelled()
            return
        with contextlib.closing(self.client.stream(path, wire)) as stream:
            for chunk in _chunks(stream, tally):
                yield chunk
                if should_stop is not None and should_stop():
                    yield tally.cancelled()
                    return
        if tally.finish is None:
            raise ServerFailedError(
                f"the server at {self.address} ended its answer without the final event: "
                f"retry, or pass --no-server to load the models here"
            )
        yield tally.finished()


def _chunks(stream: Iterator[dict[str, Any]], tally: Tally) -> Iterator[Event]:
    for event in stream:
        chunk = tally.read(event)
        if chunk is not None:
            yield chunk


def _first_model(listed: Any) -> Mapping[str, Any]:
    data = listed.get("data") if isinstance(listed, dict) else None
    first = data[0] if isinstance(data, list) and data else None
    return first if isinstance(first, dict) else {}


def _served(
    kind: ServerKind,
    model_id: str,
    reported: Any,
    meta: dict[str, Any],
    window: int | None,
) -> Served:
    """A window the server reports goes in `meta` (a `--ctx-size` must match it); one it
    does not is the user's `window`."""
    if isinstance(reported, int) and reported > 0:
        meta["n_ctx"] = reported
    elif window is not None:
        meta["n_ctx"] = window
    return Served(kind, model_id, int(meta.get("n_ctx", 0)), meta)


def _llama_cpp_served(model_id: str, props: Mapping[str, Any], window: int | None) -> Served:
    settings = props["default_generation_settings"]
    meta: dict[str, Any] = {}
    path = props.get("model_path")
    if isinstance(path, str) and path:
        meta["target"] = Path(path).name
    name = model_id or str(props.get("model_alias") or "")
    return _served(ServerKind.LLAMA_CPP, name, settings.get("n_ctx"), meta, window)


def _wire_messages(messages: Sequence[Message]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in messages]


def _spec_mode(body: Mapping[str, Any]) -> str:
    spec = body.get(SPECULATION.nested)
    mode = spec.get(SPECULATION.shorthand) if isinstance(spec, dict) else spec
    return str(mode) if mode else "server"


def wire_body(kind: ServerKind, body: Mapping[str, Any]) -> dict[str, Any]:
    """`body` for this kind of server: localspec takes it whole; llama.cpp all but `spec`;
    a generic server OpenAI's fields, plus the extensions vLLM and SGLang know when they
    change something (a server that knows none of them refuses them: nothing is dropped)."""
    wire = dict(body)
    if kind is ServerKind.LOCALSPEC:
        return wire
    wire.pop(SPECULATION.nested, None)
    if kind is ServerKind.LLAMA_CPP:
        return wire
    for name, generic in GENERIC.items():
        if name in wire:
            value = wire.pop(name)
            if value != generic.neutral:
                wire[generic.name] = value
    return wire
