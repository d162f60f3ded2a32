"""The status bar: every figure visible at 80 columns, the model's name cut first, and a
label rewritten only when its text changes.

The layout is a pure function (tested on its own), and the app is driven at 80 and 160
columns with fixed figures (a finished answer's statistics) to check what the screen shows:
each figure's label lies inside the screen, is not covered, and the screen's line holds its
whole text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Label

from localspec import GenerationStats
from tests.tui.helpers import launch, ready, wait_until
from tui.app import ChatApp
from tui.generation import LiveStats
from tui.store import ChatStore
from tui.widgets.status import (
    STATS_IDS,
    Figure,
    StatusBar,
    context_figure,
    ellipsized,
    layout,
    stats_figures,
)

LONG_NAME = "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M"
FIGURE_IDS = (*STATS_IDS, "context")


def finished(stats: GenerationStats, proposer: str) -> LiveStats:
    """Figures as the bar shows them after an answer: the engine's exact statistics."""
    return LiveStats(started=0.0, first_token=0.0, proposer=proposer, final=stats)


def typical() -> LiveStats:
    """34.5 tok/s, TTFT 0.31s, 38% accepted, 2.50 tokens per step, drafting 5 at a time."""
    stats = GenerationStats(
        mode="draft",
        generated_tokens=250,
        total_s=7.56,
        prefill_s=0.31,
        ttft_s=0.31,
        target_steps=100,
        drafted=400,
        accepted=150,
    )
    return finished(stats, "draft:5")


def widest() -> LiveStats:
    """The widest figures a real run reaches: a GPU's speed, a long prompt's TTFT, every
    draft accepted at n-gram length 16."""
    stats = GenerationStats(
        mode="ngram",
        generated_tokens=12345,
        total_s=10.0,
        ttft_s=12.34,
        target_steps=100,
        drafted=900,
        accepted=900,
    )
    return finished(stats, "ngram:16")


# (used, n_ctx, max_tokens, files, files_tokens) for show_context
TYPICAL_CONTEXT = (1234, 4096, 256, 2, 850)
WIDEST_CONTEXT = (32768, 32768, 256, 12, 12345)


def show_live(bar: StatusBar, stats: LiveStats, context: tuple[int, int, int, int, int]) -> None:
    used, n_ctx, max_tokens, files, files_tokens = context
    bar.show_stats(stats)
    bar.show_context(used, n_ctx, max_tokens, files, files_tokens)


def _figures(stats: LiveStats, context: tuple[int, int, int, int, int]) -> tuple[Figure, ...]:
    used, n_ctx, _max_tokens, files, files_tokens = context
    return (*stats_figures(stats), context_figure(used, n_ctx, files, files_tokens))


def test_figures_read_as_before_in_full() -> None:
    figures = _figures(typical(), TYPICAL_CONTEXT)
    assert [figure.full for figure in figures] == [
        "34.5 tok/s",
        "TTFT 0.31s",
        "accept 38%",
        "len 2.50",
        "draft:5",
        "ctx 1234/4096 · 2 files 850 tok",
    ]
    assert [figure.compact for figure in figures] == [
        "34.5t/s",
        "TTFT 0.31s",
        "acc 38%",
        "len 2.50",
        "draft:5",
        "ctx 1234/4096 · 2f 850t",
    ]
    assert context_figure(5, 512).full == "ctx 5/512"  # no files: the meter as it was
    assert context_figure(5, 512, 1, 40).full == "ctx 5/512 · 1 file 40 tok"
    assert context_figure(0, 0).full == "ctx --"
    assert stats_figures(None)[0].full == "-- tok/s"


def test_an_answer_a_server_paused_for_an_editor_says_it_shared_the_model() -> None:
    stats = typical()
    assert stats.final is not None
    stats.final = dataclasses.replace(stats.final, interruptions=2)
    speed = stats_figures(stats)[0]
    assert (speed.full, speed.compact) == ("34.5 tok/s · shared x2", "34.5t/s*")
    assert stats_figures(typical())[0].full == "34.5 tok/s"  # alone: as before


def test_an_answer_the_guard_ran_plain_says_so() -> None:
    stats = typical()
    assert stats.final is not None
    stats.final = dataclasses.replace(stats.final, guard="latency")
    proposer = stats_figures(stats)[4]
    assert (proposer.full, proposer.compact) == ("plain (guard: latency)", "guard")
    assert stats_figures(typical())[4].full == "draft:5"


def test_ellipsis_cuts_to_the_width() -> None:
    assert ellipsized(LONG_NAME, 100) == LONG_NAME
    assert ellipsized(LONG_NAME, 8) == "Qwen2.5…"
    assert ellipsized("tiny", 4) == "tiny"


def test_the_name_gives_way_before_the_figures() -> None:
    figures = _figures(typical(), TYPICAL_CONTEXT)
    full = sum(len(figure.full) + 2 for figure in figures)
    compact = sum(len(figure.compact) + 1 for figure in figures)
    for width in range(compact, 200):
        fitted = layout(width, LONG_NAME, figures)
        assert fitted.compact == (width < full), width  # abbreviated only when they must be
        used = compact + 1 if fitted.compact else full + 2
        if fitted.model is None:
            assert width - used < 8, width  # dropped only when fewer than 8 columns are left
        else:
            assert len(fitted.model) + used <= width, width  # never pushes a figure out
            assert fitted.model == LONG_NAME or fitted.model.endswith("…"), width
    assert layout(200, LONG_NAME, figures).model == LONG_NAME


def _app(tiny_target: Path, tmp_path: Path) -> ChatApp:
    settings = dataclasses.replace(launch(tiny_target), model_label=LONG_NAME)
    return ChatApp(settings, store=ChatStore(tmp_path / "chat.sqlite3"))


async def measured(pilot: Pilot[None]) -> StatusBar:
    """The bar once the model is loaded and the screen has measured the context."""
    screen = await ready(pilot)
    bar = screen.query_one(StatusBar)
    meter = bar.query_one("#context", Label)
    await wait_until(pilot, lambda: "--" not in str(meter.render()), "the context meter")
    return bar


def _on_screen(pilot: Pilot[None], label: Label) -> str:
    """What the screen shows where `label` is, after checking that all of it is shown."""
    screen = pilot.app.screen
    geometry = screen.find_widget(label)
    region = geometry.region
    assert region.width > 0 and region.right <= screen.size.width, label.id
    assert geometry.clip.intersection(region) == region, f"{label.id} is clipped"
    assert all(
        screen.get_widget_at(x, region.y)[0] is label for x in range(region.x, region.right)
    ), f"{label.id} is covered"
    line = screen._compositor.render_strips()[region.y].text
    return line[region.x : region.right].strip()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("stats", "context", "model"),
    [(typical, TYPICAL_CONTEXT, "Qwen2.5-Co…"), (widest, WIDEST_CONTEXT, None)],
    ids=["typical", "widest"],
)
async def test_every_figure_is_visible_at_80_columns(
    tiny_target: Path,
    tmp_path: Path,
    stats: Callable[[], LiveStats],
    context: tuple[int, int, int, int, int],
    model: str | None,
) -> None:
    app = _app(tiny_target, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        bar = await measured(pilot)
        live = stats()
        show_live(bar, live, context)
        await pilot.pause()
        expected = [figure.compact for figure in _figures(live, context)]
        shown = [_on_screen(pilot, bar.query_one(f"#{i}", Label)) for i in FIGURE_IDS]
        assert shown == expected
        name = bar.query_one("#model", Label)
        assert (_on_screen(pilot, name) if name.display else None) == model
        assert bar.query_one("#context").has_class("warn") == (context == WIDEST_CONTEXT)


@pytest.mark.anyio
async def test_at_160_columns_everything_shows_in_full(tiny_target: Path, tmp_path: Path) -> None:
    app = _app(tiny_target, tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        bar = await measured(pilot)
        show_live(bar, typical(), TYPICAL_CONTEXT)
        await pilot.pause()
        expected = [LONG_NAME, *(figure.full for figure in _figures(typical(), TYPICAL_CONTEXT))]
        shown = [_on_screen(pilot, bar.query_one(f"#{i}", Label)) for i in ("model", *FIGURE_IDS)]
        assert shown == expected
        # narrowed to 80 columns, the same figures take their compact forms
        await pilot.resize_terminal(80, 24)
        await wait_until(pilot, lambda: bar.has_class("compact"), "the bar to fit 80 columns")
        await pilot.pause()
        assert _on_screen(pilot, bar.query_one("#speed", Label)) == "34.5t/s"


def _counted(label: Label, updated: list[str]) -> Callable[..., None]:
    """`label.update`, noting the label's id in `updated` at each call."""
    original = label.update

    def update(*args: Any, **kwargs: Any) -> None:
        updated.append(str(label.id))
        original(*args, **kwargs)

    return update


@pytest.mark.anyio
async def test_a_label_is_updated_only_when_its_text_changes(
    tiny_target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = _app(tiny_target, tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        bar = await measured(pilot)
        updated: list[str] = []
        for label in bar.query(Label):
            monkeypatch.setattr(label, "update", _counted(label, updated))
        show_live(bar, typical(), TYPICAL_CONTEXT)
        assert sorted(updated) == sorted(FIGURE_IDS)  # every figure left its dashes
        updated.clear()
        show_live(bar, typical(), TYPICAL_CONTEXT)
        bar.show_model(LONG_NAME)
        assert updated == []  # the same texts again: nothing is refreshed
        later = typical()
        assert later.final is not None
        later.final = dataclasses.replace(later.final, accepted=160)  # 40% accepted, 2.60 per step
        bar.show_stats(later)
        assert updated == ["acceptance", "mean-length"]
