"""The options several commands share, declared without importing the engine.

`localspec --help` and a `complete` that talks to a running server start fast because this
module needs only the speculation settings, not llama.cpp or numpy.

The load-time options (`--ctx-size`, `--draft-ctx-size`, `--threads`, `--gpu-layers`,
`--draft-gpu-layers`, `--flash-attn`, `--cache-type-v`, `--ubatch-size`, `--mmap`) default to
None, so that `complete` can tell an option the user gave, which a running server must match,
from one left at its default (see `options.runtime_settings`). The generation options keep concrete
defaults, and each notes when it was given (`given`): `chat --conversation` lets the options
typed win over that conversation's saved settings.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from typing import Any

from localspec.speculative.settings import DEFAULT_P_MIN, SpecMode, SpecSettings

DEFAULT_CTX_SIZE = 4096
DEFAULT_CACHE_REUSE = 256  # `serve --cache-reuse`, as llama.vscode starts llama-server
DEFAULT_PARALLEL = 3  # `serve --parallel`: an editor, a chat and an agent
MAX_PARALLEL = 16
"""`serve --parallel`'s most: each slot may keep a whole context's KV states of both models in
host memory (~120 MB at 4,096 tokens on the 1.5B target), and 10,000,000 slots took 2.7 GB
before the first request."""
MAX_QUEUE = 64
"""`serve --queue`'s most: each waiting request holds its parsed body (up to `--max-body`) and
its prompt's tokens until its turn."""
FIM_REQUESTS = 35  # `bench editor --fim-requests`: completions in the replayed session
DEFAULT_CACHE_RAM_MIB = 1024  # `serve --cache-ram` (see `RuntimeSettings.cache_ram_mib`)
# `serve --cache-disk`: an agent's 18k-token prefix is ~500 MB of state with the 1.5B target
DEFAULT_CACHE_DISK_MIB = 4096
DEFAULT_CACHE_DISK_MIN = 1024  # `serve --cache-disk-min` (`prompt_store.DEFAULT_MIN_TOKENS`)
# `serve --prompt-hold` (localspec.llama.pieces' PROMPT_HOLD_S, without llama.cpp)
DEFAULT_PROMPT_HOLD_S = 5.0
ALL_LAYERS = -1
FLASH_ATTN_CHOICES = ("auto", "on", "off")  # localspec.llama.devices', without llama.cpp
VALUE_CACHE_CHOICES = ("f16", "bf16")  # localspec.llama.context's, without llama.cpp
DEFAULT_MAX_TOKENS = 256
# `--ubatch-size`'s range (localspec.llama.pieces' MIN_PIECE and MAX_PIECE, without llama.cpp)
MIN_UBATCH, MAX_UBATCH = 16, 512

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_GIVEN = "options_given"


class Noted(argparse.Action):
    """argparse's plain store that also notes its option as given: a value equal to the
    default cannot say whether the user typed it (`--temperature 0` must still win)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, _GIVEN, given(namespace) | {self.dest})


def given(args: argparse.Namespace) -> frozenset[str]:
    """The destinations (`temperature`, `draft_max`, ...) of the generation and speculation
    options typed on the command line, whatever their values."""
    return frozenset(getattr(args, _GIVEN, ()))


def unescape(text: str) -> str:
    r"""`\n`, `\t`, `\r` and `\\` as the characters they name; other backslashes stay.

    A shell passes `--stop "\n\n"` as a backslash and an n, twice: unescaped, the README's
    example stops at a blank line as it says.
    """
    return _ESCAPE.sub(lambda match: _ESCAPES.get(match[1], match[0]), text)


def stop_string(text: str) -> str:
    """An argparse type: a `--stop` value, unescaped; an empty one would stop every answer
    before its first token."""
    value = unescape(text)
    if not value:
        raise argparse.ArgumentTypeError("a stop string cannot be empty")
    return value


INT_LIMIT = 2**31 - 1
"""The largest whole number any option takes (the server refuses larger request fields too):
llama.cpp counts tokens, positions and layers in 32-bit integers."""
NUMBER_LIMIT = 1e9
"""The largest magnitude a fractional option takes: none means anything near it."""


def at_least(
    minimum: int, meaning: str = "", *, at_most: int = INT_LIMIT, most_meaning: str = ""
) -> Callable[[str], int]:
    """An argparse type: an integer of at least `minimum` (`meaning` says what the least
    value does, e.g. "-1: all") and at most `at_most` (`most_meaning`: why); argparse names
    the option in the error ("argument --max-tokens: must be at most 2147483647, not ...")."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            also = f" ({meaning})" if meaning else ""
            raise argparse.ArgumentTypeError(f"must be at least {minimum}{also}, not {value}")
        if value > at_most:
            why = f" ({most_meaning})" if most_meaning else ""
            raise argparse.ArgumentTypeError(f"must be at most {at_most}{why}, not {value}")
        return value

    return parse


whole = at_least(-INT_LIMIT)
"""An argparse type: a whole number whose own range is checked where it is used."""
slot_count = at_least(
    1,
    "1: one sequence, requests in arrival order",
    at_most=MAX_PARALLEL,
    most_meaning="each slot may keep a whole context's caches in memory",
)
"""An argparse type: `serve --parallel`'s slots."""
waiting_count = at_least(
    0,
    "0: only the running request",
    at_most=MAX_QUEUE,
    most_meaning="each waiting request holds its body and prompt in memory",
)
"""An argparse type: `serve --queue`'s waiting requests."""


def number(text: str) -> float:
    """An argparse type: a finite number of magnitude at most NUMBER_LIMIT (NaN, `inf` and
    1e999 pass `float` and no range check after it)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not -NUMBER_LIMIT <= value <= NUMBER_LIMIT:  # NaN fails both comparisons
        raise argparse.ArgumentTypeError(
            f"must be a number between {-NUMBER_LIMIT:g} and {NUMBER_LIMIT:g}, not {text}"
        )
    return value


def ubatch_size(text: str) -> int:
    """An argparse type: prompt tokens per llama.cpp call (`--ubatch-size`), at most the batch."""
    value = at_least(MIN_UBATCH)(text)
    if value > MAX_UBATCH:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_UBATCH} (localspec's batch), not {value}"
        )
    return value


_DAY_S = 86400.0


def seconds(text: str) -> float:
    """An argparse type: a duration in seconds, 0 or more (at most a day)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value <= _DAY_S:
        raise argparse.ArgumentTypeError(f"must be between 0 and {_DAY_S:g} seconds, not {text}")
    return value


_SEED_LIMIT = 2**32 - 1  # llama.cpp's seeds are 32-bit


def seed(text: str) -> int | None:
    """An argparse type: a sampling seed; a negative one means random, as in llama.cpp."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value > _SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"must be at most {_SEED_LIMIT}, not {value}")
    return value if value >= 0 else None


MODEL, SPECULATION, SAMPLING, LIMITS, SERVER = (
    "model",
    "speculation",
    "sampling",
    "limits",
    "server",
)
"""The headings `--help` groups the shared options under, in this order, for every command."""


def option_group(parser: argparse.ArgumentParser, title: str) -> argparse._ArgumentGroup:
    """`parser`'s group `title`, made on first use: options declared in several places show
    under one heading (the limits of an answer and of a grammar; the guard beside --spec)."""
    for group in parser._action_groups:
        if group.title == title:
            return group
    return parser.add_argument_group(title)


def add_context_options(group: argparse._ActionsContainer) -> None:
    """--ctx-size and --draft-ctx-size: for the commands that load models, and for `doctor`,
    which says what KV memory they take. The draft's range (`loading.check_draft_ctx`)
    depends on --ctx-size, so it is checked once both are known."""
    group.add_argument(
        "--ctx-size",
        type=at_least(1),
        help=f"context window in tokens (default {DEFAULT_CTX_SIZE})",
    )
    group.add_argument(
        "-cd",
        "--draft-ctx-size",
        type=at_least(1),
        metavar="N",
        help="the draft model's context in tokens, at least 128 (default: --ctx-size): its KV "
        "memory is this many tokens' worth, and a longer text is drafted from its last part",
    )


def add_model_options(parser: argparse.ArgumentParser) -> None:
    group = option_group(parser, MODEL)
    group.add_argument(
        "-m",
        "--model",
        help="a pair or model name from the registry (`localspec models`), or a GGUF path "
        "(default: the registry's default pair)",
    )
    group.add_argument("--target", help="target model (name, GGUF path, owner/repo/file.gguf)")
    group.add_argument("--draft", help="draft model of the same family as the target")
    group.add_argument(
        "--mtp",
        action="store_true",
        default=None,  # not given: a running server may draft either way
        help="draft with the target's own MTP layers instead of a draft model (a GGUF that "
        "carries them, e.g. Qwen3.5/3.6: `localspec models` says which)",
    )
    group.add_argument(
        "--offline", action="store_true", help="never download: use only files already here"
    )
    add_context_options(group)
    group.add_argument("--threads", type=at_least(1), help="CPU threads (default: all cores)")
    layers = at_least(ALL_LAYERS, f"{ALL_LAYERS}: all")
    group.add_argument(
        "--gpu-layers", type=layers, help=f"target layers on GPU (default {ALL_LAYERS}: all)"
    )
    group.add_argument(
        "--draft-gpu-layers", type=layers, help=f"draft layers on GPU (default {ALL_LAYERS}: all)"
    )
    group.add_argument(
        "--flash-attn",
        choices=FLASH_ATTN_CHOICES,
        help="llama.cpp's flash attention (default auto: off on a CPU with --ctx-size 8192 or "
        "more, where its CPU kernel is the slower path; otherwise llama.cpp's choice)",
    )
    group.add_argument(
        "-ctv",
        "--cache-type-v",
        choices=VALUE_CACHE_CHOICES,
        help="the target's value cache type (default f16, llama.cpp's). bf16: the calibration "
        "finds batches of up to 3 tokens exact on a CPU, so greedy drafts are verified 3 at a "
        "time, for 5-8%% slower decoding and 15-35%% slower prompts; not yet guaranteed to "
        "equal plain decoding (docs/exactness.md)",
    )
    group.add_argument(
        "-ub",
        "--ubatch-size",
        type=ubatch_size,
        help="prompt tokens per llama.cpp call, 16-512 (default: 512, and 128 on a CPU for "
        "30 s after an editor's request stopped a prompt, which bounds the work a stop "
        "throws away)",
    )
    group.add_argument(
        "--mmap",
        action="store_true",
        default=None,
        help="memory-map model files: faster start, but repacked CPU weights stay resident twice",
    )


def add_generation_options(
    parser: argparse.ArgumentParser, max_tokens: int | None = DEFAULT_MAX_TOKENS
) -> None:
    """The speculation, sampling and length options, under those headings. `max_tokens`: the
    default of --max-tokens (None: the command decides; `serve` leaves it to each request, as
    llama-server does). The options that take a value note when they are given (`given`)."""
    spec, sampling, limits = (option_group(parser, t) for t in (SPECULATION, SAMPLING, LIMITS))
    limits.add_argument(
        "--max-tokens",
        action=Noted,
        type=whole,
        default=max_tokens,
        help="longest answer in tokens"
        + (f" (default {max_tokens})" if max_tokens else " (default: until the context is full)"),
    )
    sampling.add_argument(
        "--temperature", action=Noted, type=number, default=0.0, help="0 = greedy (default)"
    )
    sampling.add_argument("--top-k", action=Noted, type=whole, default=0)
    sampling.add_argument("--top-p", action=Noted, type=number, default=1.0)
    sampling.add_argument("--min-p", action=Noted, type=number, default=0.0)
    sampling.add_argument("--repeat-penalty", action=Noted, type=number, default=1.0)
    sampling.add_argument(
        "--seed", action=Noted, type=seed, help="sampling seed (default or negative: random)"
    )
    limits.add_argument(
        "--stop",
        action="append",
        type=stop_string,
        default=[],
        help=r"stop string (repeatable); \n, \t, \r and \\ stand for a newline, a tab, a "
        r'carriage return and a backslash, so --stop "\n\n" stops at a blank line',
    )
    limits.add_argument(
        "--ignore-eos", action="store_true", help="generate --max-tokens tokens regardless of EOS"
    )
    # speculation options default to None: unset, the chosen pair's registry settings apply,
    # then localspec's defaults (see options.spec_settings)
    spec.add_argument(
        "--spec",
        action=Noted,
        choices=[m.value for m in SpecMode],
        help="auto (default: the tuner picks per step from measured costs and acceptance), "
        "off, ngram (prompt lookup), draft (the draft model) or hybrid (n-gram when it "
        "matches, else the draft model); unset: the pair's setting in models.toml, else auto",
    )
    defaults = SpecSettings()
    spec.add_argument(
        "--draft-max",
        action=Noted,
        type=whole,
        help=f"longest draft-model draft (default {defaults.draft_max})",
    )
    spec.add_argument(
        "--p-min",
        action=Noted,
        type=number,
        default=None,
        help="the draft model stops before a token it gives less probability than this "
        f"(default: tuned by auto, {DEFAULT_P_MIN} in draft and hybrid)",
    )
    spec.add_argument(
        "--ngram-max",
        action=Noted,
        type=whole,
        help=f"longest n-gram draft (default {defaults.ngram_draft_max})",
    )
    spec.add_argument(
        "--ngram-min-match",
        action=Noted,
        type=whole,
        help="draft from a lookup only after a match of at least this many tokens "
        f"(default {defaults.ngram_min_match})",
    )
    spec.add_argument(
        "--max-draft-tokens",
        action=Noted,
        type=at_least(0),
        help="a request drafts at most this many tokens in all, then decodes plainly "
        "(default: no limit; 0: no drafting)",
    )
    spec.add_argument(
        "--max-draft-ms",
        action=Noted,
        type=number,
        help="a request's proposers spend at most this many milliseconds in all, then it "
        "decodes plainly (default: no limit)",
    )
    spec.add_argument(
        "--no-redecode-ties",
        dest="redecode_ties",
        action="store_false",
        default=None,
        help="at temperature 0, verify each draft in one batch instead of in chunks that "
        "decode exactly as one token at a time (docs/exactness.md): faster, but the answer may "
        "then differ from --spec off after a near-tie",
    )
    spec.add_argument(
        "--no-suffix-drafts",
        dest="suffix_drafts",
        action="store_false",
        default=None,
        help="n-gram drafts only from the most recent match, not suffix drafts (the most "
        "frequent continuation in this request and in earlier requests' prompts and answers); "
        "what is answered still teaches the store (--no-suffix-store: in memory only)",
    )


def add_server_options(parser: argparse.ArgumentParser, what: str) -> None:
    """--server/--no-server and how to talk to the server; `what` says what a server that
    runs other models or load options than given means for this command."""
    group = option_group(parser, SERVER)
    where = group.add_mutually_exclusive_group()
    where.add_argument(
        "--server",
        metavar="SOCKET_OR_URL",
        help="use this server: a localspec socket path, or an http(s) URL of `localspec serve`, "
        f"llama-server or any OpenAI-compatible endpoint (vLLM, SGLang), {what}; default: "
        "the local `localspec serve` if it is running and can honour the options",
    )
    where.add_argument(
        "--no-server", action="store_true", help="load the models here even if a server runs"
    )
    group.add_argument(
        "--api-key",
        help="the server's API key (default: $LOCALSPEC_API_KEY, else for a loopback URL the "
        "token of `localspec serve`, else $OPENAI_API_KEY)",
    )
    group.add_argument(
        "--server-kind",
        choices=["auto", "localspec", "llama.cpp", "openai"],
        default="auto",
        help="what the server is (default auto: a socket is localspec's, a URL is asked); "
        "openai: any OpenAI-compatible server, whatever it says of itself",
    )


def add_watch_options(parser: argparse.ArgumentParser, *, guard: bool = True) -> None:
    """The guard over speculation (`localspec.observe.guard`), the history and the suffix
    store's file, for the commands users run (benchmarks compare modes as asked, so they have
    none of them), under the speculation heading. `complete` has no --no-guard: one generation
    per process, its guard never acts."""
    group = option_group(parser, SPECULATION)
    if guard:
        group.add_argument(
            "--no-guard",
            dest="guard",
            action="store_false",
            help="never fall back to plain decoding on a route where speculation's p95 time per "
            "token runs over plain decoding's by 10%%, or wastes more than 3 rejected draft "
            "tokens per accepted one (default: the guard falls back for 10 requests, then tries "
            "speculation again)",
        )
    group.add_argument(
        "--no-history",
        action="store_true",
        help="record nothing in the history file `localspec stats` reads (default: each "
        "generation's figures, never its text, in the data folder, 0600)",
    )
    group.add_argument(
        "--no-suffix-store",
        action="store_true",
        help="keep the prompts and answers suffix drafts learn from in memory only (default: "
        "also in a file per project folder and model in the state folder, 0600, at most "
        "128k tokens, so the next process drafts from them too)",
    )
