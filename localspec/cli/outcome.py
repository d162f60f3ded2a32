"""The end of a `complete` generation, however it was produced (here or by a server)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Outcome:
    finish_reason: str
    stats: dict[str, Any]  # GenerationStats.to_dict(), plus where it ran ("via")
