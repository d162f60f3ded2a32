"""The runtime folder without a usable XDG_RUNTIME_DIR: chosen by localspec, private, quiet."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from localspec.paths import RuntimeFolderError, default_socket_path, runtime_dir
from tests.test_cli import localspec


@pytest.fixture
def no_runtime_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # gettempdir() caches TMPDIR
    return tmp_path / f"localspec-{os.getuid()}"


def test_commands_without_xdg_runtime_dir_keep_stderr_clean(
    tmp_path: Path, tiny_target: Path
) -> None:
    def without_runtime_dir(*args: str | Path) -> subprocess.CompletedProcess[str]:
        """As under cron or in a fresh container: no XDG_RUNTIME_DIR (TMPDIR: the test's)."""
        return localspec(*args, env={"TMPDIR": str(tmp_path)}, unset=("XDG_RUNTIME_DIR",))

    doctor = without_runtime_dir("doctor", "--json")
    assert doctor.returncode == 0
    assert doctor.stderr == ""
    folder = tmp_path / f"localspec-{os.getuid()}"
    assert json.loads(doctor.stdout)["server_socket"] == str(folder / "localspec.sock")
    info = folder.lstat()
    assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700
    assert info.st_uid == os.getuid()
    complete = without_runtime_dir(
        "complete", "--target", tiny_target, "--spec", "off", "--raw", "--max-tokens", "2", "hi"
    )
    assert complete.returncode == 0
    assert complete.stderr == ""


def test_a_private_xdg_runtime_dir_is_used_as_it_is() -> None:
    assert runtime_dir() == Path(os.environ["XDG_RUNTIME_DIR"]) / "localspec"
    assert default_socket_path() == runtime_dir() / "localspec.sock"


def test_an_xdg_runtime_dir_others_can_read_is_passed_over(
    no_runtime_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shared = tmp_path / "shared-run"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(shared))
    assert runtime_dir() == no_runtime_dir


def test_our_fallback_folder_with_a_loose_mode_is_made_private(no_runtime_dir: Path) -> None:
    no_runtime_dir.mkdir(mode=0o755)
    no_runtime_dir.chmod(0o755)
    assert runtime_dir() == no_runtime_dir
    assert stat.S_IMODE(no_runtime_dir.stat().st_mode) == 0o700


def test_a_fallback_name_taken_by_a_link_is_refused(no_runtime_dir: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    no_runtime_dir.symlink_to(elsewhere)
    with pytest.raises(RuntimeFolderError, match="symbolic link"):
        default_socket_path()


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a folder to another user")
def test_a_fallback_folder_of_another_user_is_refused(no_runtime_dir: Path) -> None:
    no_runtime_dir.mkdir(mode=0o700)
    os.chown(no_runtime_dir, 4242, -1)
    with pytest.raises(RuntimeFolderError, match="belongs to uid 4242") as refused:
        runtime_dir()
    assert "set XDG_RUNTIME_DIR" in str(refused.value)


def test_our_fallback_folder_that_others_could_write_in_is_refused(no_runtime_dir: Path) -> None:
    """Someone may have left a socket in it while it was writable: refused, never reused."""
    no_runtime_dir.mkdir(mode=0o700)
    no_runtime_dir.chmod(0o777)
    with pytest.raises(RuntimeFolderError, match="mode is 777"):
        runtime_dir()


def test_serve_refuses_a_runtime_folder_that_is_a_link(tmp_path: Path, tiny_target: Path) -> None:
    """Following the link would make the folder it points to 0700 and put the socket there."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    elsewhere.chmod(0o755)
    linked = Path(os.environ["XDG_RUNTIME_DIR"]) / "localspec"
    linked.symlink_to(elsewhere)
    result = localspec("serve", "--target", tiny_target, "--spec", "off")
    assert result.returncode == 1, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert f"the runtime folder {linked} is not a private folder" in line
    assert "symbolic link" in line and "remove it" in line
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o755
    assert list(elsewhere.iterdir()) == []
