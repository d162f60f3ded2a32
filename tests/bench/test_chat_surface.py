"""`localspec bench chat` as the installed command, on the tiny models.

It drives the real app headless, so a run proves the whole path: prompts typed into the app,
answers streamed and finished, `complete`'s path beside them. Only counts and states are
checked, never a speed.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_cli import localspec


def test_chat_against_complete_per_prompt_and_mode(
    tiny_target: Path, tiny_draft_noisy: Path, tmp_path: Path
) -> None:
    out = tmp_path / "chat.json"
    args: list[str | Path] = ["--target", tiny_target, "--draft", tiny_draft_noisy]
    args += ["--ctx-size", "2048", "--modes", "off,auto", "--max-tokens", "16", "--repeats", "2"]
    args += ["--category", "generate", "--category", "edit", "--json", out]
    result = localspec("bench", "chat", *args)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == (
        "| prompt | mode | complete tok/s | chat tok/s | chat/complete | app CPU ms/token "
        "| same answer |"
    )
    for prompt in ("palindrome", "edit-retry"):
        for mode in ("off", "auto"):
            assert f"| {prompt} | {mode} | " in result.stdout
    assert "median chat/complete (off): " in result.stdout
    assert "median chat/complete (auto): " in result.stdout
    assert "plain decoding here (complete, off, median of 2 prompts): " in result.stdout
    assert "[16/16]" in result.stderr  # 2 prompts x 2 modes x 2 repeats x 2 surfaces
    doc = json.loads(out.read_text())
    assert doc["settings"]["surface"] == "chat" and doc["settings"]["max_tokens"] == 16
    assert doc["settings"]["workloads"] == ["palindrome", "edit-retry"]
    runs = doc["runs"]
    assert len(runs) == 16
    for prompt in ("palindrome", "edit-retry"):
        for mode in ("off", "auto"):
            for repeat in (0, 1):
                pair = [
                    r
                    for r in runs
                    if (r["workload"], r["mode"], r["repeat"]) == (prompt, mode, repeat)
                ]
                assert sorted(r["surface"] for r in pair) == ["chat", "complete"]
                # the same rendered prompt and token budget on both surfaces
                assert len({r["prompt_tokens"] for r in pair}) == 1
                assert all(0 < r["tokens"] <= 16 for r in pair)
                chat = [r for r in pair if r["surface"] == "chat"]
                assert chat[0]["app_ms_per_token"] >= 0
    # plain decoding gives the same answer on both surfaces
    assert all(row["same_answers"] for row in doc["report"]["off"]["prompts"].values())
    assert doc["report"]["auto"]["prompts"]["palindrome"]["runs"] == 4
    assert len(doc["plain_runs"]) == 2  # the off runs of `complete`, first repeat
    assert doc["plain_tokens_per_second"] > 0


def test_without_off_the_plain_speed_is_measured_apart(tiny_target: Path, tmp_path: Path) -> None:
    out = tmp_path / "chat.json"
    args: list[str | Path] = ["--target", tiny_target, "--ctx-size", "2048", "--quick"]
    args += ["--category", "debug", "--json", out]
    result = localspec("bench", "chat", *args)
    assert result.returncode == 0, result.stderr
    assert "| debug-default | auto | " in result.stdout
    doc = json.loads(out.read_text())
    assert doc["settings"]["modes"] == ["auto"] and doc["settings"]["max_tokens"] == 48
    assert [r["surface"] for r in doc["runs"]].count("chat") == 1
    assert [(r["mode"], r["surface"]) for r in doc["plain_runs"]] == [("off", "complete")]


def test_modes_a_conversation_cannot_take_are_refused(tiny_target: Path) -> None:
    for extra in (["--modes", "ngram:6"], ["--chart", "x.png"], ["--category", "fim"]):
        result = localspec("bench", "chat", "--target", tiny_target, *extra)
        assert result.returncode == 2, (extra, result.stderr)
        assert "Traceback" not in result.stderr and result.stdout == ""
