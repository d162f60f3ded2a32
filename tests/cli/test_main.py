"""The CLI's top level: an unexpected error (a bug) is one line and an exit code, never a
bare traceback; the traceback goes to a log file in the user's state folder."""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path

import pytest

import localspec.cli.models
from localspec.cli import main
from localspec.paths import error_log_path


def _bug(_args: argparse.Namespace) -> int:
    raise RuntimeError("boom\nsecond line")


@pytest.fixture
def buggy_models_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """`localspec models` with a bug in it (the handler imports the command when it runs)."""
    monkeypatch.setattr(localspec.cli.models, "models_command", _bug)


def test_an_unexpected_error_is_one_line_and_its_traceback_is_kept(
    buggy_models_command: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["models"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert "localspec: internal error: RuntimeError: boom (a bug;" in captured.err
    assert str(error_log_path()) in captured.err
    assert str(error_log_path()).startswith(os.environ["XDG_STATE_HOME"])
    trace = error_log_path().read_text()
    assert "Traceback" in trace and "RuntimeError: boom" in trace and "_bug" in trace


def test_the_traceback_is_private_and_never_written_through_a_link(
    buggy_models_command: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It may quote the user's prompt: 0600 in a 0700 state folder; a link planted at its
    name is refused, its target untouched."""
    assert main(["models"]) == 1
    assert stat.S_IMODE(error_log_path().stat().st_mode) == 0o600
    assert stat.S_IMODE(error_log_path().parent.stat().st_mode) == 0o700
    error_log_path().unlink()
    elsewhere = tmp_path / "notes.txt"
    elsewhere.write_text("someone's notes")
    error_log_path().symlink_to(elsewhere)
    assert main(["models"]) == 1
    assert capsys.readouterr().err.count("\n") == 2
    assert elsewhere.read_text() == "someone's notes"


def test_verbose_logs_the_traceback_too(
    buggy_models_command: None,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert main(["--verbose", "models"]) == 1
    assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [RuntimeError]
    err = capsys.readouterr().err
    assert "localspec: internal error: RuntimeError: boom (a bug; the traceback is above" in err


def test_an_unwritable_state_folder_still_gives_one_line(
    buggy_models_command: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))
    assert main(["models"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "a bug; see it with --verbose" in err
