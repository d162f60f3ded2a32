"""Tool schemas the tool-calling tests of every API share: each bounds its strings and
numbers, so a random tiny model finishes a call well within its `max_tokens`."""

from __future__ import annotations

from typing import Any

WEATHER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 6},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
