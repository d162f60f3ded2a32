"""The status bar: how fast the answer comes and why, and how full the context window is.

Figures: tokens per second, time to first token, draft acceptance rate, mean tokens per target
step (1.0 is plain decoding), the proposer and draft length of the latest step (in auto mode,
the tuner's choice), and the context meter, which turns to a warning at 80% of the window.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label

from tui.generation import WARN_FRACTION, LiveStats


class StatusBar(Horizontal):
    """One line of live generation figures and the context meter."""

    def compose(self) -> ComposeResult:
        yield Label("", id="model")
        yield Label("", id="speed")
        yield Label("", id="ttft")
        yield Label("", id="acceptance")
        yield Label("", id="mean-length")
        yield Label("", id="proposer")
        yield Label("", id="context")

    def on_mount(self) -> None:
        self.show_stats(None)

    def show_model(self, label: str) -> None:
        self.query_one("#model", Label).update(label)

    def show_stats(self, stats: LiveStats | None) -> None:
        """The figures of the current (or last) answer; dashes before the first one."""
        if stats is None or stats.first_token is None:
            values = ["-- tok/s", "TTFT --", "accept --", "len --", "--"]
        else:
            values = [
                f"{stats.tokens_per_second:.1f} tok/s",
                f"TTFT {stats.ttft_s:.2f}s",
                f"accept {stats.acceptance_rate:.0%}",
                f"len {stats.mean_acceptance_length:.2f}",
                stats.proposer,
            ]
        for widget_id, value in zip(
            ("speed", "ttft", "acceptance", "mean-length", "proposer"), values, strict=True
        ):
            self.query_one(f"#{widget_id}", Label).update(value)

    def show_context(self, used: int, n_ctx: int, max_tokens: int) -> None:
        """`used` tokens of the window; warns when the next answer would pass 80% of it."""
        meter = self.query_one("#context", Label)
        if n_ctx <= 0:
            meter.update("ctx --")
            meter.remove_class("warn")
            return
        meter.update(f"ctx {used}/{n_ctx}")
        meter.set_class(used + max_tokens >= WARN_FRACTION * n_ctx, "warn")
