"""The status bar: how fast the answer comes and why, and how full the context window is.

Figures: tokens per second (marked "shared" when a server paused the answer for an editor's
requests, which its times then include), time to first token, draft acceptance rate, mean
tokens per target step (1.0 is plain decoding), the proposer and draft length of the latest
step (in auto mode, the tuner's choice), and the context meter (with the files in context and
their token cost), which turns to a warning at 80% of the window.

The figures matter more than the model's name, so the bar is laid out for its width: the
figures in full when they fit, the name in what is left (cut with an ellipsis, or dropped);
when even the figures do not fit, they take their compact forms. At 80 columns every figure
stays visible. A label is rewritten only when its text changes: the bar is updated several
times a second while an answer streams, and most of those updates change one figure or none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label

from tui.generation import WARN_FRACTION, LiveStats

STATS_IDS = ("speed", "ttft", "acceptance", "mean-length", "proposer")
# columns of padding around each label: `0 1` in full, `0 1 0 0` compact (see chat.tcss)
FULL_PADDING, COMPACT_PADDING = 2, 1
# a name cut shorter than this says nothing: it is dropped instead
MIN_NAME = 8
ELLIPSIS = "…"


@dataclass(frozen=True)
class Figure:
    """One label's text, in full and in the compact form used when the bar is narrow."""

    full: str
    compact: str

    def text(self, compact: bool) -> str:
        return self.compact if compact else self.full


@dataclass(frozen=True)
class Layout:
    """What the bar shows at one width: compact figures or not, and the model's text (None
    when it is dropped)."""

    compact: bool
    model: str | None


def stats_figures(stats: LiveStats | None) -> tuple[Figure, ...]:
    """The five generation figures (in `STATS_IDS` order); dashes before the first token."""
    if stats is None or stats.first_token is None:
        return (
            Figure("-- tok/s", "--t/s"),
            Figure("TTFT --", "TTFT --"),
            Figure("accept --", "acc --"),
            Figure("len --", "len --"),
            Figure("--", "--"),
        )
    speed = f"{stats.tokens_per_second:.1f}"
    ttft = f"TTFT {stats.ttft_s:.2f}s"
    # the server paused the answer for an editor's requests: its times include theirs
    shared = f" · shared x{stats.interruptions}" if stats.interruptions else ""
    # a server that does not report speculation (a generic OpenAI one): dashes, not zeros
    reported = stats.speculation_reported
    acceptance = f"{stats.acceptance_rate:.0%}" if reported else "--"
    length = f"len {stats.mean_acceptance_length:.2f}" if reported else "len --"
    proposer = stats.proposer if reported else "--"
    if stats.guard:  # speculation ran slower than plain decoding here lately: plain for now
        proposer = f"plain (guard: {stats.guard})"
    return (
        Figure(f"{speed} tok/s{shared}", f"{speed}t/s{'*' if shared else ''}"),
        Figure(ttft, ttft),
        Figure(f"accept {acceptance}", f"acc {acceptance}"),
        Figure(length, length),
        Figure(proposer, "guard" if stats.guard else proposer),
    )


def context_figure(used: int, n_ctx: int, files: int = 0, files_tokens: int = 0) -> Figure:
    """The meter: tokens in use of the window, and the files in context with their cost."""
    if n_ctx <= 0:
        return Figure("ctx --", "ctx --")
    meter = f"ctx {used}/{n_ctx}"
    if files <= 0:
        return Figure(meter, meter)
    noun = "file" if files == 1 else "files"
    return Figure(
        f"{meter} · {files} {noun} {files_tokens} tok", f"{meter} · {files}f {files_tokens}t"
    )


def ellipsized(text: str, width: int) -> str:
    """`text` in at most `width` cells, its end replaced by an ellipsis when it is longer."""
    if cell_len(text) <= width:
        return text
    kept = ""
    for character in text:
        if cell_len(kept + character) > width - 1:
            break
        kept += character
    return kept + ELLIPSIS


def _columns(figures: Sequence[Figure], compact: bool) -> int:
    padding = COMPACT_PADDING if compact else FULL_PADDING
    return sum(cell_len(figure.text(compact)) + padding for figure in figures)


def layout(width: int, model: str, figures: Sequence[Figure]) -> Layout:
    """Full figures when they fit in `width` columns, else compact ones; the model's name
    in what is left, cut or dropped (its place is worth less than any figure's)."""
    compact = _columns(figures, compact=False) > width
    padding = COMPACT_PADDING if compact else FULL_PADDING
    room = width - _columns(figures, compact) - padding
    if not model or room < min(MIN_NAME, cell_len(model)):
        return Layout(compact, None)
    return Layout(compact, ellipsized(model, room))


class StatusBar(Horizontal):
    """One line of live generation figures and the context meter."""

    def __init__(
        self,
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._model = ""
        self._stats = stats_figures(None)
        self._meter = context_figure(0, 0)
        self._shown: dict[str, str] = {}

    def compose(self) -> ComposeResult:
        yield Label("", id="model")
        for widget_id in STATS_IDS:
            yield Label("", id=widget_id)
        yield Label("", id="context")

    def on_mount(self) -> None:
        self._render_bar()

    def on_resize(self, event: events.Resize) -> None:
        self._render_bar()

    def show_model(self, label: str) -> None:
        self._model = label
        self._render_bar()

    def show_stats(self, stats: LiveStats | None) -> None:
        """The figures of the current (or last) answer; dashes before the first one."""
        self._stats = stats_figures(stats)
        self._render_bar()

    def show_context(
        self, used: int, n_ctx: int, max_tokens: int, files: int = 0, files_tokens: int = 0
    ) -> None:
        """`used` tokens of the window (`files` files in context cost `files_tokens` of
        them); warns when the next answer would pass 80% of it."""
        self._meter = context_figure(used, n_ctx, files, files_tokens)
        warn = n_ctx > 0 and used + max_tokens >= WARN_FRACTION * n_ctx
        self.query_one("#context", Label).set_class(warn, "warn")
        self._render_bar()

    def _render_bar(self) -> None:
        figures = (*self._stats, self._meter)
        fitted = layout(self.size.width, self._model, figures)
        self.set_class(fitted.compact, "compact")
        model = self.query_one("#model", Label)
        model.display = fitted.model is not None
        self._put(model, fitted.model or "")
        for widget_id, figure in zip((*STATS_IDS, "context"), figures, strict=True):
            self._put(self.query_one(f"#{widget_id}", Label), figure.text(fitted.compact))

    def _put(self, label: Label, text: str) -> None:
        """Update `label` only when its text changes (each update refreshes the layout)."""
        assert label.id is not None
        if self._shown.get(label.id) != text:
            self._shown[label.id] = text
            label.update(text)
