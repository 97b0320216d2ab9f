"""CheckpointStore: atomic writes, verified reads, the index, pruning, refused names."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

from services.checkpoint import store as store_mod
from services.checkpoint.store import (
    CheckpointCorrupt,
    CheckpointIndex,
    CheckpointStore,
    check_file_names,
)

REPO = Path(__file__).resolve().parents[3]

FILES = {
    "actor/model.safetensors": bytes(range(256)) * 40,
    "critic/model.safetensors": os.urandom(5000),
    "optim/adam.json": b'{"lr": 0.0002}',
    "empty.bin": b"",
}
META = b'{"iteration": 3,  "counters": {"env_steps": 12288}, "config": {"profile": "tiny"}}'


@pytest.fixture
def store(tmp_path):
    said: list[str] = []
    s = CheckpointStore(tmp_path / "run" / "checkpoints", say=said.append)
    s.said = said  # type: ignore[attr-defined]
    return s


def iterations(store: CheckpointStore) -> list[int]:
    return [e.iteration for e in store.index().entries]


def flip_byte(path: Path, offset: int = 10) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


# ----------------------------------------------------------------------------- round trip


def test_write_then_read_is_byte_exact(store):
    path = store.write(3, FILES, META)
    assert path == store.root / "00000003"
    manifest, files = store.read(3)
    assert files == FILES
    assert list(files) == list(FILES)  # manifest keeps the order the files were given
    assert manifest.iteration == 3 and manifest.format_version == 1
    assert bytes(manifest.meta) == META  # embedded verbatim, whitespace and all
    assert manifest.files["critic/model.safetensors"].sha256 == hashlib.sha256(FILES["critic/model.safetensors"]).hexdigest()
    assert manifest.files["empty.bin"].bytes == 0
    assert (path / "actor" / "model.safetensors").read_bytes() == FILES["actor/model.safetensors"]


def test_manifest_is_plain_json_without_itself(store):
    store.write(0, FILES, META)
    doc = json.loads((store.root / "00000000" / "manifest.json").read_bytes())
    assert set(doc) == {"format_version", "iteration", "created_unix_ns", "meta", "files"}
    assert doc["meta"] == json.loads(META)
    assert sorted(doc["files"]) == sorted(FILES)
    assert "manifest.json" not in doc["files"]
    assert doc["files"]["optim/adam.json"] == {"sha256": hashlib.sha256(b'{"lr": 0.0002}').hexdigest(), "bytes": 14}


def test_write_accepts_numpy_buffers(store):
    import numpy as np

    arr = np.frombuffer(b"abcdef", dtype=np.uint8)
    store.write(1, {"a.bin": arr}, b"{}")
    assert store.read(1)[1] == {"a.bin": b"abcdef"}


def test_index_lists_writes_newest_last(store):
    for it in (0, 5, 10):
        store.write(it, {"a": b"x"}, b"{}")
    idx = msgspec.json.decode((store.root / "index.json").read_bytes(), type=CheckpointIndex)
    assert [(e.iteration, e.name) for e in idx.entries] == [(0, "00000000"), (5, "00000005"), (10, "00000010")]
    assert store.latest()[0].iteration == 10


def test_rewriting_an_iteration_replaces_it(store):
    store.write(2, {"a": b"old", "gone.bin": b"1"}, b'{"v": 1}')
    store.write(3, {"a": b"three"}, b"{}")
    store.write(2, {"a": b"new"}, b'{"v": 2}')
    manifest, files = store.read(2)
    assert files == {"a": b"new"} and bytes(manifest.meta) == b'{"v": 2}'
    assert not (store.root / "00000002" / "gone.bin").exists()
    # the rewrite is the newest write: a run resumed at 2 must not come back to the stale 3
    assert iterations(store) == [3, 2]
    assert store.latest()[1] == {"a": b"new"}
    assert sorted(p.name for p in store.root.iterdir()) == ["00000002", "00000003", "index.json"]


def test_meta_must_be_json(store):
    with pytest.raises(ValueError, match="meta is not a JSON document"):
        store.write(1, {"a": b"x"}, b"not json")
    assert not store.root.exists() or list(store.root.iterdir()) == []


def test_negative_iteration_refused(store):
    with pytest.raises(ValueError, match="iteration -1 must be an int >= 0"):
        store.write(-1, {"a": b"x"}, b"{}")


# ----------------------------------------------------------------------------- verification


def test_flipped_byte_is_detected_and_names_the_file(store):
    store.write(4, FILES, META)
    flip_byte(store.root / "00000004" / "critic" / "model.safetensors")
    with pytest.raises(CheckpointCorrupt) as info:
        store.read(4)
    assert info.value.file == "critic/model.safetensors"
    assert "critic/model.safetensors" in str(info.value) and "sha256" in str(info.value)


def test_first_failing_file_in_manifest_order_is_named(store):
    store.write(4, FILES, META)
    flip_byte(store.root / "00000004" / "optim" / "adam.json", 2)
    flip_byte(store.root / "00000004" / "critic" / "model.safetensors")
    with pytest.raises(CheckpointCorrupt) as info:
        store.read(4)
    assert info.value.file == "critic/model.safetensors"


def test_missing_file_truncated_file_and_bad_manifest(store):
    store.write(1, FILES, META)
    folder = store.root / "00000001"
    (folder / "optim" / "adam.json").unlink()
    with pytest.raises(CheckpointCorrupt, match="optim/adam.json: missing") as info:
        store.read(1)
    assert info.value.file == "optim/adam.json"

    store.write(2, FILES, META)
    actor = store.root / "00000002" / "actor" / "model.safetensors"
    actor.write_bytes(actor.read_bytes()[:-1])
    with pytest.raises(CheckpointCorrupt, match="10239 bytes, the manifest says 10240") as info:
        store.read(2)
    assert info.value.file == "actor/model.safetensors"

    store.write(3, FILES, META)
    (store.root / "00000003" / "manifest.json").write_bytes(b'{"format_version": 1, "iter')
    with pytest.raises(CheckpointCorrupt, match="manifest.json: unparseable") as info:
        store.read(3)
    assert info.value.file == "manifest.json"


def test_manifest_with_escaping_name_is_corrupt(store):
    store.write(1, {"a": b"x"}, b"{}")
    path = store.root / "00000001" / "manifest.json"
    doc = json.loads(path.read_bytes())
    doc["files"]["../../outside"] = doc["files"].pop("a")
    path.write_text(json.dumps(doc))
    with pytest.raises(CheckpointCorrupt, match="refused file name"):
        store.read(1)


def test_newer_manifest_format_is_refused_by_name(store):
    store.write(1, {"a": b"x"}, b"{}")
    path = store.root / "00000001" / "manifest.json"
    doc = json.loads(path.read_bytes())
    doc["format_version"] = 2
    doc["new_field"] = True
    path.write_text(json.dumps(doc))
    with pytest.raises(CheckpointCorrupt, match="format_version 2 is newer than this build reads"):
        store.read(1)


def test_latest_skips_a_corrupt_newest_and_reports_it(store):
    store.write(1, {"a": b"one"}, b"{}")
    store.write(2, {"a": b"two"}, b"{}")
    flip_byte(store.root / "00000002" / "a", 0)
    problems: list[str] = []
    manifest, files = store.latest(problems)
    assert manifest.iteration == 1 and files == {"a": b"one"}
    assert len(problems) == 1 and "00000002" in problems[0] and "a: sha256" in problems[0]
    assert store.said == problems
    assert iterations(store) == [1, 2]  # reading never edits the index
    statuses = store.list_entries()
    assert [(s.iteration, s.ok) for s in statuses] == [(1, True), (2, False)]
    assert statuses[0].bytes == 3 and statuses[1].problem.startswith("a: sha256")


def test_latest_is_none_without_checkpoints(store):
    assert store.latest() is None
    store.write(1, {"a": b"x"}, b"{}")
    shutil.rmtree(store.root / "00000001")
    problems: list[str] = []
    assert store.latest(problems) is None
    assert "manifest.json: missing (no such checkpoint folder)" in problems[0]


def test_latest_reads_the_index_never_folder_names(store):
    store.write(7, {"a": b"seven"}, b"{}")
    (store.root / "99999999").mkdir()
    (store.root / "99999999" / "junk").write_bytes(b"junk")
    (store.root / "zzz-stray-file").write_bytes(b"not a checkpoint")
    (store.root / "00000100.partial").mkdir()
    manifest, files = store.latest()
    assert manifest.iteration == 7 and files == {"a": b"seven"}


def test_unreadable_index_is_an_error_naming_the_fix(store):
    store.write(1, {"a": b"x"}, b"{}")
    (store.root / "index.json").write_bytes(b"{broken")
    with pytest.raises(CheckpointCorrupt, match="delete it to start a new index"):
        store.latest()
    with pytest.raises(CheckpointCorrupt):
        store.write(2, {"a": b"x"}, b"{}")
    assert not (store.root / "00000002").exists()


# ----------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    "name, message",
    [
        ("/etc/passwd", "is absolute"),
        ("../escape.bin", "has a '..' component"),
        ("actor/../../escape.bin", "has a '..' component"),
        ("./a", "has a '.' component"),
        ("actor//model", "has an empty component"),
        ("actor/", "has an empty component"),
        ("actor\\model", "contains a backslash"),
        ("a\0b", "contains a NUL"),
        ("x" * 201, "is 201 characters; the limit is 200"),
        ("manifest.json", "is reserved for the checkpoint's own manifest"),
        ("", "is empty"),
    ],
)
def test_bad_file_names_are_refused(store, name, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        store.write(1, {"fine.bin": b"1", name: b"x"}, b"{}")
    assert not store.root.exists()  # refused before anything touched the disk


def test_name_rules_between_names():
    assert check_file_names(["a/manifest.json", "b" * 200]) == ["a/manifest.json", "b" * 200]
    with pytest.raises(ValueError, match="'a/b' is given twice"):
        check_file_names(["a/b", "c", "a/b"])
    with pytest.raises(ValueError, match="'Model' differs only in case from 'model'"):
        check_file_names(["model", "Model"])
    with pytest.raises(ValueError, match="'actor' is also a folder of 'actor/model'"):
        check_file_names(["actor/model", "actor"])


# ----------------------------------------------------------------------------- prune


def test_prune_keeps_exactly_n_with_strays_around(store):
    for it in range(6):
        store.write(it, {"a": str(it).encode()}, b"{}")
    (store.root / "README.txt").write_text("a stray file")
    leftover = store.root / "00000099.partial"
    (leftover / "actor").mkdir(parents=True)
    (leftover / "actor" / "model.safetensors").write_bytes(b"half")
    removed = store.prune(3)
    assert removed == ["00000000", "00000001", "00000002", "00000099.partial"]
    assert iterations(store) == [3, 4, 5]
    assert sorted(p.name for p in store.root.iterdir()) == ["00000003", "00000004", "00000005", "README.txt", "index.json"]
    assert store.latest()[1] == {"a": b"5"}
    assert store.prune(3) == [] and store.housekeeping_failures == 0


def test_unremovable_folder_stays_indexed_until_the_next_prune(store, monkeypatch):
    for it in range(4):
        store.write(it, {"a": b"x"}, b"{}")
    real_rmtree = shutil.rmtree

    def locked(path, *args, **kwargs):
        if Path(path).name == "00000000":
            raise PermissionError(13, "Permission denied (file locked)", str(path))
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(store_mod.shutil, "rmtree", locked)
    assert store.prune(2) == ["00000001"]
    assert store.housekeeping_failures == 1
    assert iterations(store) == [0, 2, 3]
    assert (store.root / "00000000").is_dir()
    assert "could not remove" in store.said[-1] and "00000000" in store.said[-1]

    monkeypatch.setattr(store_mod.shutil, "rmtree", real_rmtree)
    assert store.prune(2) == ["00000000"]
    assert iterations(store) == [2, 3]
    assert not (store.root / "00000000").exists()
    assert store.housekeeping_failures == 1


def test_prune_never_raises(store, monkeypatch):
    store.write(0, {"a": b"x"}, b"{}")
    store.write(1, {"a": b"x"}, b"{}")
    (store.root / "index.json").write_bytes(b"garbage")
    assert store.prune(1) == []
    assert store.housekeeping_failures == 1
    assert store.prune(1) == [] and store.housekeeping_failures == 2
    with pytest.raises(ValueError, match="keep at least 1"):
        store.prune(0)


def test_prune_drops_entries_whose_folder_is_already_gone(store):
    for it in range(3):
        store.write(it, {"a": b"x"}, b"{}")
    shutil.rmtree(store.root / "00000000")
    assert store.prune(2) == ["00000000"]
    assert iterations(store) == [1, 2]


# ----------------------------------------------------------------------------- crash safety

_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import services.checkpoint.store as st

    stage = sys.argv[2]
    real_write_file, real_replace_file = st.write_file, st.replace_file

    def slow_write_file(path, data):
        real_write_file(path, data)
        if stage == "files":
            print("WROTE", path, flush=True)
            time.sleep(60)

    def slow_replace_file(path, data):
        if stage == "index":
            print("RENAMED", flush=True)
            time.sleep(60)
        real_replace_file(path, data)

    st.write_file, st.replace_file = slow_write_file, slow_replace_file
    st.CheckpointStore(Path(sys.argv[1])).write(2, {"actor/model.safetensors": b"N" * 100000, "b": b"new"}, b"{}")
    """
)


@pytest.mark.parametrize("stage", ["files", "index"])
def test_sigkill_mid_write_leaves_the_previous_checkpoint(store, stage):
    """A writer killed (SIGKILL: no cleanup runs) while filling ``.partial`` or after the
    rename but before the index update: the previous checkpoint still reads, verifies and
    is what the index and ``latest`` name."""
    store.write(1, {"actor/model.safetensors": b"O" * 100000, "b": b"old"}, b'{"i": 1}')
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(store.root), stage],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("WROTE" if stage == "files" else "RENAMED"), line
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.stdout.close()

    assert iterations(store) == [1]
    manifest, files = store.latest()
    assert manifest.iteration == 1 and files == {"actor/model.safetensors": b"O" * 100000, "b": b"old"}
    if stage == "files":
        assert (store.root / "00000002.partial").is_dir() and not (store.root / "00000002").exists()
        assert store.prune(5) == ["00000002.partial"]
    else:
        # published but never indexed: invisible to latest(), and rewritten by the next attempt
        assert (store.root / "00000002").is_dir()
    store.write(2, {"b": b"retry"}, b"{}")
    assert iterations(store) == [1, 2] and store.latest()[1] == {"b": b"retry"}
    assert sorted(p.name for p in store.root.iterdir()) == ["00000001", "00000002", "index.json"]


def test_failed_write_leaves_no_partial_and_keeps_the_old_checkpoint(store, monkeypatch):
    store.write(1, {"a": b"old"}, b"{}")
    real = store_mod.write_file

    def disk_full(path, data):
        if path.name == "b":
            raise OSError(28, "No space left on device")
        real(path, data)

    monkeypatch.setattr(store_mod, "write_file", disk_full)
    with pytest.raises(OSError, match="No space left"):
        store.write(1, {"a": b"new", "b": b"new"}, b"{}")
    assert sorted(p.name for p in store.root.iterdir()) == ["00000001", "index.json"]
    assert store.latest()[1] == {"a": b"old"}


def test_failed_publish_of_a_rewrite_puts_the_old_folder_back(store, monkeypatch):
    store.write(1, {"a": b"old"}, b"{}")
    real = os.replace

    def refuse_publish(src, dst):
        if str(src).endswith(".partial"):
            raise OSError(5, "Input/output error")
        return real(src, dst)

    monkeypatch.setattr(store_mod.os, "replace", refuse_publish)
    with pytest.raises(OSError, match="Input/output error"):
        store.write(1, {"a": b"new"}, b"{}")
    monkeypatch.setattr(store_mod.os, "replace", real)
    assert sorted(p.name for p in store.root.iterdir()) == ["00000001", "index.json"]
    assert store.read(1)[1] == {"a": b"old"}
