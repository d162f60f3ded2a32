"""The shipped workloads and the mode grammar: the bench's inputs, without any model."""

from __future__ import annotations

from pathlib import Path

import pytest

from localspec.bench.modes import ALL_MODES, Kind, draft_need, parse_modes
from localspec.bench.workloads import load_workloads, select
from localspec.errors import UsageError
from localspec.fim import ExtraChunk
from localspec.speculative.engine import SpecMode


def test_shipped_workloads_cover_every_category() -> None:
    workloads = load_workloads(None)
    assert len(workloads) >= 12
    categories = {w.category for w in workloads}
    assert categories == {"edit", "generate", "explain", "fim", "json", "json-schema"}
    fims = [w for w in workloads if w.is_fim]
    assert len(fims) >= 3 and all(w.prefix and w.suffix and not w.prompt for w in fims)
    # copy-heavy edits: the answer repeats most of a long input
    assert sum(w.category == "edit" for w in workloads) >= 5
    assert max(w.prompt.count("\n") for w in workloads if w.category == "edit") >= 40


def test_fim_workloads_may_carry_extra_chunks(tmp_path: Path) -> None:
    """Editors send chunks of nearby code (llama.vim's ring); some shipped FIM prompts do."""
    shipped = [w for w in load_workloads(None) if w.is_fim and w.extra]
    assert len(shipped) >= 2 and all(c.filename and c.text for w in shipped for c in w.extra)
    path = tmp_path / "w.jsonl"
    path.write_text(
        '{"id": "a", "category": "fim", "prefix": "x", "suffix": "y", '
        '"extra": [{"filename": "b.py", "text": "B = 2"}, {"text": "C = 3"}]}\n'
    )
    [workload] = load_workloads(path)
    assert workload.extra == (ExtraChunk("b.py", "B = 2"), ExtraChunk("", "C = 3"))


def test_quick_selection_takes_the_first_of_each_category() -> None:
    workloads = load_workloads(None)
    quick = select(workloads, None, one_per_category=True)
    assert [w.category for w in quick] == [
        "edit",
        "generate",
        "explain",
        "json",
        "fim",
        "json-schema",
    ]
    only_fim = select(workloads, ["fim"], one_per_category=False)
    assert {w.category for w in only_fim} == {"fim"} and len(only_fim) >= 3
    with pytest.raises(UsageError, match="no workloads in category"):
        select(workloads, ["poetry"], one_per_category=False)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 1"),
        ('{"id": "a", "category": "fim", "prompt": "x"}', "needs prefix and suffix"),
        ('{"id": "a", "category": "edit"}', "needs a prompt"),
        ('{"id": "a", "category": "edit", "prompt": "x", "colour": 1}', "colour"),
        ('{"id": "a", "category": "j", "prompt": "x", "constraint": {}}', "one key"),
        ('{"id": "a", "category": "j", "prompt": "x", "constraint": {"yaml": "x"}}', "'yaml'"),
        ('{"id": "a", "category": "j", "prompt": "x", "constraint": {"regex": 1}}', "'regex'"),
        ('{"id": "a", "category": "edit", "prompt": "x", "extra": [{"text": "y"}]}', "only a fim"),
        ('{"id": "a", "category": "fim", "prefix": "x", "extra": ["y"]}', "string `text`"),
    ],
)
def test_bad_workload_lines_say_which_and_why(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "w.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(UsageError, match=message):
        load_workloads(path)


def test_duplicate_ids_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    path.write_text('{"id": "a", "category": "edit", "prompt": "x"}\n' * 2)
    with pytest.raises(UsageError, match="unique"):
        load_workloads(path)


def test_modes_parse_into_localspec_and_baselines() -> None:
    modes = {m.name: m for m in parse_modes("off, ngram:5, draft:3, hybrid, auto, lcp-lookup")}
    assert modes["ngram:5"].spec is not None and modes["ngram:5"].spec.ngram_draft_max == 5
    assert modes["draft:3"].spec is not None and modes["draft:3"].spec.draft_max == 3
    assert modes["lcp-lookup"].kind is Kind.LCP_LOOKUP and modes["lcp-lookup"].k == 10
    server = parse_modes("off,server-draft:4,server-ngram-mod")
    assert [m.kind for m in server] == [Kind.LOCALSPEC, Kind.SERVER, Kind.SERVER]
    assert server[1].server_spec == "draft" and server[1].k == 4 and server[1].uses_draft_model


def test_all_expands_to_the_full_grid_once() -> None:
    names = [m.name for m in parse_modes("off,all,draft:4")]
    assert names == ALL_MODES.split(",")
    drafts = [n for n in names if n.startswith("draft:")]
    assert drafts == ["draft:1", "draft:2", "draft:3", "draft:4", "draft:6", "draft:8"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ngram,draft:2", "must include off"),
        ("off,turbo", "unknown mode"),
        ("off,draft:x", "must be a number"),
        ("off,draft:0", "between 1 and 64"),
        ("off,auto:3", "takes no draft length"),
        ("off,server-ngram-mod:3", "only server-draft"),
    ],
)
def test_bad_modes_are_usage_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_modes(text)


def test_draft_need_follows_the_modes() -> None:
    assert draft_need(parse_modes("off,ngram")) is False
    assert draft_need(parse_modes("off,auto")) is None
    assert draft_need(parse_modes("off,auto,server-draft")) is True
    hybrid = parse_modes("off,hybrid")[1].spec
    assert hybrid is not None and hybrid.mode is SpecMode.HYBRID
