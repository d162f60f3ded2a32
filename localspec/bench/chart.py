"""`--chart`: the speed-up over plain decoding per category and mode, as a PNG bar chart
(and the loading and saving that `localspec stats --chart` shares).

matplotlib is an optional extra (`localspec[bench]`): the runtime itself never draws, so it
is imported only here, and its absence is reported before any model is loaded.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from localspec.errors import UsageError
from localspec.paths import open_private


def ensure_available() -> None:
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--chart needs matplotlib: pip install 'localspec[bench]'")


def load_pyplot() -> Any:
    """matplotlib's pyplot, drawing to files only (no display needed, none assumed)."""
    ensure_available()
    import matplotlib  # type: ignore[import-not-found, unused-ignore]  # noqa: PLC0415

    matplotlib.use("Agg")
    from matplotlib import pyplot  # type: ignore[import-not-found, unused-ignore]  # noqa: PLC0415

    return pyplot


def save_png(pyplot: Any, figure: Any, path: Path) -> None:
    """Write `figure` to `path` as a PNG and release it."""
    figure.tight_layout()
    try:
        with os.fdopen(open_private(path), "wb") as file:  # never through a link
            figure.savefig(file, format="png", dpi=120)
    except OSError as exc:
        raise UsageError(f"cannot write the chart to {path}: {exc.strerror}") from exc
    finally:
        pyplot.close(figure)


def write_chart(report: dict[str, dict[str, Any]], modes: list[str], path: Path) -> None:
    """Grouped bars of `ratio_to_off`, one group per category, a line at 1.0 (= off)."""
    pyplot = load_pyplot()
    categories = list(report)
    shown = [m for m in modes if m != "off" and any(m in rows for rows in report.values())]
    width = 0.8 / max(len(shown), 1)
    figure, axes = pyplot.subplots(
        figsize=(max(6.0, 0.3 * len(categories) * (len(shown) + 2)), 4.5)
    )
    for i, mode in enumerate(shown):
        xs = [c + (i - (len(shown) - 1) / 2) * width for c in range(len(categories))]
        ys = [report[c][mode]["ratio_to_off"] if mode in report[c] else 0.0 for c in categories]
        axes.bar(xs, ys, width, label=mode)
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_xticks(range(len(categories)), categories)
    axes.set_ylabel("speed / off (median)")
    axes.set_title("localspec bench: decoding speed relative to plain decoding")
    axes.legend(fontsize="small", ncols=min(len(shown), 4) or 1)
    save_png(pyplot, figure, path)
