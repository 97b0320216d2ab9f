"""A warm start or KL anchor from another run's clone (royalefleet/clone_import.py): ``<run>:snap:<id>``
or an exported folder, verified by its sha256, copied into the run and named ``snap:<id>``
before the learner reads the config. No torch: the store holds bytes."""

from __future__ import annotations

import hashlib
import json

import msgspec
import pytest

from royalefleet import cli
from royalefleet.clone_import import CloneImportRefused, bring_clones, import_clone
from services.checkpoint.snapshots import SnapshotStore
from tests.royalefleet.test_start_config import stack  # noqa: F401 -- the fixture: no stack starts

WEIGHTS, SPEC = b"clone weights", b'{"iteration": 0, "probe": {}}'
SID = hashlib.sha256(WEIGHTS).hexdigest()[:16]


@pytest.fixture
def runs(tmp_path):
    runs = tmp_path / "runs"
    assert SnapshotStore(runs / "imitate" / "snapshots").write(WEIGHTS, SPEC)[0] == SID
    (runs / "imitate" / "clones" / SID).mkdir(parents=True)
    (runs / "imitate" / "clones" / SID / "critic.safetensors").write_bytes(b"critic")
    return runs


def test_a_snapshot_of_another_run_is_verified_and_copied_with_its_critic(runs):
    assert import_clone(f"imitate:snap:{SID}", runs, "mine", "warm_start.snapshot") == f"snap:{SID}"
    assert SnapshotStore(runs / "mine" / "snapshots").read(SID) == (WEIGHTS, SPEC)
    assert (runs / "mine" / "clones" / SID / "critic.safetensors").read_bytes() == b"critic"
    # damaged at the source: the id no longer is the weights' sha256 prefix
    (runs / "imitate" / "snapshots" / SID / "actor.safetensors").write_bytes(b"other weights")
    with pytest.raises(CloneImportRefused, match=f"imitation.reference: snapshot {SID}: actor.safetensors hashes "
                                                 "to [0-9a-f]{16}, not its name"):
        import_clone(f"imitate:snap:{SID}", runs, "mine2", "imitation.reference")


def test_an_exported_folder_is_verified_by_bot_json_sha256(runs, tmp_path):
    folder = tmp_path / "my-clone"
    folder.mkdir()
    (folder / "actor.safetensors").write_bytes(WEIGHTS)
    (folder / "spec.json").write_bytes(SPEC)
    (folder / "bot.json").write_bytes(msgspec.json.encode({"actor_sha256": hashlib.sha256(WEIGHTS).hexdigest()}))
    assert import_clone(str(folder), runs, "mine", "warm_start.snapshot") == f"snap:{SID}"
    assert SnapshotStore(runs / "mine" / "snapshots").read(SID) == (WEIGHTS, SPEC)
    (folder / "actor.safetensors").write_bytes(b"tampered")
    with pytest.raises(CloneImportRefused, match=r"sha256 [0-9a-f]{16}\.\.\. is not bot.json's "
                                                 f"{hashlib.sha256(WEIGHTS).hexdigest()[:16]}"):
        import_clone(str(folder), runs, "mine3", "warm_start.snapshot")
    assert not (runs / "mine3").exists()  # nothing written for a refused clone


def test_a_missing_run_or_snapshot_or_source_is_refused_naming_the_way(runs):
    with pytest.raises(CloneImportRefused, match=r"no run 'imitat'.*\(did you mean 'imitate'\?\)"):
        import_clone(f"imitat:snap:{SID}", runs, "mine", "warm_start.snapshot")
    with pytest.raises(CloneImportRefused, match="run 'imitate' has no snapshot 0000000000000000 under .*"
                                                 "`royalefleet snapshots imitate` lists them"):
        import_clone("imitate:snap:0000000000000000", runs, "mine", "warm_start.snapshot")
    with pytest.raises(CloneImportRefused, match="expected snap:<id> .*, <run>:snap:<id> .* or the folder "
                                                 "`royalefleet export` wrote"):
        import_clone("nowhere", runs, "mine", "warm_start.snapshot")


def test_bring_clones_rewrites_both_references_and_keeps_own_ids(runs):
    said = []
    doc = {"profile": "tiny", "warm_start": {"snapshot": f"imitate:snap:{SID}", "hold_actor_iterations": 2},
           "imitation": {"reference": f"snap:{SID}"}}
    out = bring_clones(doc, runs, "mine", said.append)
    assert out == {"profile": "tiny", "warm_start": {"snapshot": f"snap:{SID}", "hold_actor_iterations": 2},
                   "imitation": {"reference": f"snap:{SID}"}}
    assert said == [f"warm_start.snapshot: imitate:snap:{SID} verified by its sha256 and copied into run 'mine''s "
                    f"snapshots as snap:{SID}"]
    assert doc["warm_start"]["snapshot"] == f"imitate:snap:{SID}"  # the caller's document is not changed


def test_up_starts_a_new_run_warm_from_another_runs_clone(runs, tmp_path, stack, capsys):  # noqa: F811
    config = tmp_path / "mine.json"
    config.write_text(json.dumps({"profile": "tiny", "warm_start": {"snapshot": f"imitate:snap:{SID}"},
                                  "imitation": {"reference": f"imitate:snap:{SID}"}}))
    assert cli.main(["up", "mine", "--config", str(config), "--runs-dir", str(runs), "--no-doctor"]) == 0
    (cfg,) = stack.started
    assert cfg.extensions["warm_start"] == {"snapshot": f"snap:{SID}", "hold_actor_iterations": 0,
                                             "critic": True}
    assert cfg.extensions["imitation"]["reference"] == f"snap:{SID}"
    assert SnapshotStore(runs / "mine" / "snapshots").read(SID) == (WEIGHTS, SPEC)
    config.write_text(json.dumps({"profile": "tiny", "warm_start": {"snapshot": "imitate:snap:0000000000000000"}}))
    assert cli.main(["up", "other", "--config", str(config), "--runs-dir", str(runs), "--no-doctor"]) == 2
    assert "warm_start.snapshot: run 'imitate' has no snapshot 0000000000000000" in capsys.readouterr().err
