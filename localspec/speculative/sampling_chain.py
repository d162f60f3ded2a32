"""The names of sampler stages, as llama.cpp spells them, and which of them localspec applies.

llama-server's `samplers` field lists the stages of the chain in order, either as names
(`["top_k", "top_p", "infill"]`, with llama.cpp's aliases: `top-k`, `topk`, `nucleus`,
`temp`, ..., any case) or as a string of one-letter codes (`"kpi"`). llama.cpp skips a name it
does not know with a warning in its log; localspec refuses it, and refuses the stages it does
not implement, rather than sample from a chain other than the one asked for.
"""

from __future__ import annotations

from collections.abc import Iterable

from localspec.errors import InvalidSettingsError

SUPPORTED = ("penalties", "top_k", "top_p", "min_p", "temperature", "infill")
"""The stages localspec applies, in llama.cpp's names."""

DEFAULT_CHAIN = ("penalties", "top_k", "top_p", "min_p", "temperature")
"""The chain a request without `samplers` gets (llama.cpp's default, less what it lacks)."""

UNSUPPORTED = ("dry", "top_n_sigma", "typ_p", "xtc", "adaptive_p")
"""llama.cpp's other stages: known, but not implemented here."""

LETTERS = {
    "d": "dry",
    "k": "top_k",
    "y": "typ_p",
    "p": "top_p",
    "s": "top_n_sigma",
    "m": "min_p",
    "t": "temperature",
    "x": "xtc",
    "i": "infill",
    "e": "penalties",
    "a": "adaptive_p",
}
"""llama.cpp's one-letter codes (`common_sampler_type_to_chr`)."""


def _aliases() -> dict[str, str]:
    """llama.cpp's spellings of each name (`common_sampler_types_from_names`)."""
    names = {name: name for name in (*SUPPORTED, *UNSUPPORTED)}
    for name in list(names):
        names[name.replace("_", "-")] = name
        names[name.replace("_", "")] = name
    names.update(nucleus="top_p", temp="temperature", typ="typ_p")
    return names


ALIASES = _aliases()

MOST_STAGES = 32
"""The most stages a chain may list: llama.cpp has eleven, and every stage runs over the
vocabulary at every step (seven million letters held one request's four tokens for 87 s)."""


def check_chain(chain: Iterable[str]) -> None:
    """Refuse a chain with a stage localspec does not apply, naming it and what it does."""
    stages = list(chain)
    unsupported = [repr(name) for name in stages if name in UNSUPPORTED]
    unknown = [repr(name) for name in stages if name not in SUPPORTED and name not in UNSUPPORTED]
    problems = [
        *([f"unknown sampler {', '.join(unknown)}"] if unknown else []),
        *(
            [f"llama.cpp's sampler {', '.join(unsupported)} not implemented in localspec"]
            if unsupported
            else []
        ),
    ]
    if problems:
        raise InvalidSettingsError(
            f"{'; '.join(problems)}: localspec applies {', '.join(SUPPORTED)} (list only "
            f"those, or leave samplers out for the default chain)"
        )


def parse_chain(value: str | Iterable[str]) -> tuple[str, ...]:
    """A client's chain in localspec's names: a string is llama.cpp's letter codes, a list
    holds names in any of llama.cpp's spellings. Refuses what `check_chain` refuses, and a
    chain of more than `MOST_STAGES` stages."""
    if not isinstance(value, str):
        value = list(value)
    if len(value) > MOST_STAGES:
        raise InvalidSettingsError(
            f"a chain of {len(value)} sampler stages: at most {MOST_STAGES} (llama.cpp has "
            f"{len(LETTERS)}; list each stage once)"
        )
    if isinstance(value, str):
        bad = [c for c in value if c not in LETTERS]
        if bad:
            letter = {name: c for c, name in LETTERS.items()}
            codes = ", ".join(f"{letter[name]} ({name})" for name in SUPPORTED)
            raise InvalidSettingsError(
                f"sampler letter {', '.join(repr(c) for c in bad)} unknown: localspec applies "
                f"{codes}"
            )
        chain = tuple(LETTERS[c] for c in value)
    else:
        chain = tuple(ALIASES.get(name.lower(), name) for name in value)
    check_chain(chain)
    return chain
