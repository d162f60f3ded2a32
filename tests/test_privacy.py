"""The user's data is the user's alone: localspec's folders 0700, its files 0600.

The chat history holds the user's code and the tuner's files say what they work on. Each test
uses the per-test XDG folders of tests/conftest.py, so the real home is never touched.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from localspec.auto_io import TunerStore
from localspec.paths import (
    PrivatePathError,
    cache_dir,
    data_dir,
    open_private,
    private_folder,
    write_private,
)
from localspec.speculative.tuner import AcceptanceModel, HardwareProfile
from tests.server.conftest import start_server
from tests.test_cli import localspec
from tui.store import ChatStore, StoreError, default_path


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_chat_database_and_its_wal_files_are_private() -> None:
    store = ChatStore()
    conversation = store.create("{}", "private")
    store.add_message(conversation.id, "user", "def secret(): ...")  # writes the WAL
    path = default_path()
    assert path.parent == data_dir()
    assert _mode(data_dir()) == 0o700
    for name in (path.name, path.name + "-wal", path.name + "-shm"):
        assert _mode(path.with_name(name)) == 0o600, name
    store.close()


def test_an_existing_data_folder_with_a_wide_mode_is_tightened_with_one_notice() -> None:
    data_dir().mkdir(parents=True)
    data_dir().chmod(0o755)
    notices: list[str] = []
    ChatStore(notice=notices.append).close()
    assert _mode(data_dir()) == 0o700
    assert len(notices) == 1
    assert str(data_dir()) in notices[0] and "755" in notices[0]
    ChatStore(notice=notices.append).close()
    assert len(notices) == 1  # already private: nothing more to say


def test_a_database_made_readable_by_others_is_made_private_again() -> None:
    ChatStore().close()
    for name in ("", "-wal", "-shm"):
        target = default_path().with_name(default_path().name + name)
        if target.exists():
            target.chmod(0o644)
    ChatStore().close()
    assert _mode(default_path()) == 0o600


def test_the_tuners_files_are_private() -> None:
    tuner = TunerStore()
    tuner.save_acceptance("pair", AcceptanceModel())
    tuner.save_profile("machine", HardwareProfile(verify_s=(0.03, 0.05), draft_s=0.02))
    for path in (tuner.acceptance_file, tuner.calibration_file):
        assert _mode(path) == 0o600, path
        assert _mode(path.parent) == 0o700, path.parent
    assert tuner.calibration_file.parent == cache_dir()
    assert [p.name for p in cache_dir().iterdir()] == ["calibration.json"]  # no temp file left


def test_write_private_replaces_a_readable_file_with_a_private_one(tmp_path: Path) -> None:
    target = tmp_path / "state" / "notes.json"
    target.parent.mkdir()
    target.write_text("old")
    target.chmod(0o644)
    write_private(target, "new")
    assert target.read_text() == "new"
    assert _mode(target) == 0o600


def test_private_folder_creates_missing_parents_private(tmp_path: Path) -> None:
    folder = private_folder(tmp_path / "a" / "b")
    assert folder.is_dir() and _mode(folder) == 0o700


def test_a_database_that_cannot_be_opened_is_one_line_naming_it(tmp_path: Path) -> None:
    broken = tmp_path / "chat.sqlite3"
    broken.write_bytes(b"this is not a database, it is a text file" * 100)
    try:
        ChatStore(broken)
    except StoreError as exc:
        assert str(broken) in str(exc) and "\n" not in str(exc)
    else:
        raise AssertionError("a corrupt database was opened")


def test_a_chat_database_that_is_a_link_is_refused_and_its_target_left_alone(
    tmp_path: Path,
) -> None:
    elsewhere = tmp_path / "notes.txt"
    elsewhere.write_text("someone else's file")
    elsewhere.chmod(0o644)
    private_folder(data_dir())
    default_path().symlink_to(elsewhere)
    with pytest.raises(PrivatePathError, match="is a symbolic link") as refused:
        ChatStore()
    assert str(default_path()) in str(refused.value) and "\n" not in str(refused.value)
    assert _mode(elsewhere) == 0o644
    assert elsewhere.read_text() == "someone else's file"


def test_a_data_folder_linked_to_a_private_folder_is_used_without_changing_it(
    tmp_path: Path,
) -> None:
    disk = tmp_path / "other-disk"
    disk.mkdir(mode=0o700)
    data_dir().parent.mkdir(parents=True, exist_ok=True)
    data_dir().symlink_to(disk)
    ChatStore().close()
    assert (disk / default_path().name).is_file()


def test_a_data_folder_linked_to_a_shared_folder_is_refused_unchanged(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    data_dir().parent.mkdir(parents=True, exist_ok=True)
    data_dir().symlink_to(shared)
    with pytest.raises(PrivatePathError, match=r"not a private folder of yours .*chmod 700"):
        ChatStore()
    assert _mode(shared) == 0o755
    assert list(shared.iterdir()) == []


def _damaged_database(path: Path) -> Path:
    """A real conversation database whose pages after the first are overwritten: the header
    (page 1) is intact, so SQLite opens it and fails only when it reads the tables."""
    store = ChatStore(path)
    conversation = store.create("{}", "to be damaged")
    for n in range(200):
        store.add_message(conversation.id, "user", f"message {n} " * 40)
    store.close()  # checkpoints the WAL into the file
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    assert len(data) > 4 * page
    data[page:] = bytes(range(256)) * ((len(data) - page) // 256) + bytes(len(data) % 256)
    path.write_bytes(bytes(data))
    return path


def test_a_damaged_database_is_one_line_saying_to_move_it_away(tmp_path: Path) -> None:
    damaged = _damaged_database(tmp_path / "chat.sqlite3")
    with pytest.raises(StoreError) as refused:
        ChatStore(damaged)
    message = str(refused.value)
    assert message.startswith(f"the conversation database {damaged} is damaged (")
    assert message.endswith("move it away (or delete it) to start with an empty history")
    assert "\n" not in message


def test_chat_with_a_damaged_database_says_so_in_one_line(tiny_target: Path) -> None:
    _damaged_database(default_path())
    result = localspec("chat", "--target", tiny_target, "--spec", "off")
    assert result.returncode == 1, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"localspec: error: the conversation database {default_path()} is")
    assert "internal error" not in line


def test_open_private_makes_an_existing_file_private_and_refuses_what_is_not_a_file_of_ours(
    tmp_path: Path,
) -> None:
    """The one opener of every file localspec writes: 0600, never a link, a FIFO (which
    would block the open), a device or a file with another name elsewhere."""
    kept = tmp_path / "kept.log"
    kept.write_text("old\n")
    kept.chmod(0o644)
    with os.fdopen(open_private(kept, append=True), "a") as handle:
        handle.write("new\n")
    assert kept.read_text() == "old\nnew\n" and _mode(kept) == 0o600
    with os.fdopen(open_private(kept), "w") as handle:
        handle.write("whole\n")
    assert kept.read_text() == "whole\n"
    elsewhere = tmp_path / "notes.txt"
    elsewhere.write_text("someone's notes")
    elsewhere.chmod(0o644)
    (tmp_path / "link").symlink_to(elsewhere)
    os.link(elsewhere, tmp_path / "hard")
    os.mkfifo(tmp_path / "fifo")
    refused = {
        "link": "symbolic link",
        "hard": "2 hard links",
        "fifo": "not a regular file",
        "/dev/full": "not a regular file",
    }
    for name, problem in refused.items():
        with pytest.raises(PrivatePathError, match=problem) as error:
            open_private(tmp_path / name)
        assert "\n" not in str(error.value)
    assert elsewhere.read_text() == "someone's notes" and _mode(elsewhere) == 0o644


def test_write_private_never_writes_through_a_link_planted_at_its_name(tmp_path: Path) -> None:
    elsewhere = tmp_path / "notes.txt"
    elsewhere.write_text("someone's notes")
    target = tmp_path / "state" / "notes.json"
    target.parent.mkdir(mode=0o700)
    target.symlink_to(elsewhere)
    target.with_name(f".notes.json.{os.getpid()}.tmp").symlink_to(elsewhere)
    write_private(target, "ours")
    assert target.read_text() == "ours" and not target.is_symlink()
    assert elsewhere.read_text() == "someone's notes"


def test_private_folder_makes_missing_parents_private_too(tmp_path: Path) -> None:
    folder = private_folder(tmp_path / "state" / "localspec" / "suffix")
    for made in (folder, folder.parent, folder.parent.parent):
        assert _mode(made) == 0o700, made


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a folder to another user")
def test_a_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 4242, -1)
    with pytest.raises(PrivatePathError, match="belongs to uid 4242"):
        private_folder(theirs)


def test_serve_keeps_every_folder_and_file_it_makes_private(tiny_target: Path) -> None:
    """The state, cache and data folders a server creates (the suffix store's, the prompt
    states', the history's) are 0700 all the way down, their files 0600."""
    server = start_server(tiny_target, None, "--spec", "off", "--cache-disk", "16")
    try:
        with server.tcp() as http:
            chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            assert http.post("/v1/chat/completions", json=chat).status_code == 200
    finally:
        assert server.stop() == 0
    roots = [Path(os.environ[v]) / "localspec" for v in ("XDG_STATE_HOME", "XDG_CACHE_HOME")]
    roots.append(Path(os.environ["XDG_DATA_HOME"]) / "localspec")
    made = [found for root in roots for found in (root, *root.rglob("*"))]
    assert {path.name for path in made} >= {"suffix", "prompts", "history.sqlite3"}
    for path in made:
        assert _mode(path) == (0o700 if path.is_dir() else 0o600), path
