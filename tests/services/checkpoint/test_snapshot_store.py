"""The snapshot store: content-addressed fp16 actors, verified on read, never pruned, served by
the checkpoint service."""

from __future__ import annotations

import json
import threading

import msgspec
import numpy as np
import pytest
import torch

from services.checkpoint.snapshots import SnapshotCorrupt, SnapshotStore, snapshot_id
from shared.nn.statefiles import bytes_to_module, module_to_bytes
from shared import transport
from shared.messages import Decoder, FromCheckpoint, LoadSnapshot, NotFound, SaveSnapshot, SnapshotLoaded, SnapshotSaved
from tests.stack import free_ports


def fp16_actor() -> tuple[torch.nn.Module, bytes]:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2)).half()
    return m, module_to_bytes(m)


def test_write_is_content_addressed_atomic_and_verified(tmp_path):
    store = SnapshotStore(tmp_path / "snapshots")
    model, data = fp16_actor()
    sid, path, created = store.write(data, b'{"iteration": 3}')
    assert sid == snapshot_id(data) and len(sid) == 16 and created
    assert sorted(p.name for p in path.iterdir()) == ["actor.safetensors", "spec.json"]
    assert store.write(data, b'{"iteration": 3}')[2] is False  # same weights: one snapshot
    actor, spec = store.read(sid)
    assert actor == data and json.loads(spec) == {"iteration": 3}
    clone = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2)).half()
    bytes_to_module(clone, actor)
    assert all(torch.equal(a, b) and a.dtype == torch.float16 for a, b in zip(clone.state_dict().values(),
                                                                              model.state_dict().values()))
    (path / "actor.safetensors").write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(SnapshotCorrupt, match=sid):
        store.read(sid)
    with pytest.raises(ValueError):
        store.write(data, b"[1, 2]")
    assert store.ids() == [sid]


def test_the_checkpoint_service_saves_and_serves_snapshots(tmp_path):
    from services.checkpoint.service import CheckpointService, Metrics

    port = free_ports(1)[0]
    sock = transport.bind_router(f"tcp://127.0.0.1:{port}")
    service = CheckpointService(sock, tmp_path, keep=3, metrics=Metrics(), out=lambda s: None)
    stop = threading.Event()
    thread = threading.Thread(target=service.serve, args=(stop.is_set,), daemon=True)
    thread.start()
    client = transport.Client(f"tcp://127.0.0.1:{port}", Decoder(FromCheckpoint), name="checkpoint", timeout_s=10)
    try:
        _, data = fp16_actor()
        reply, _ = client.request(SaveSnapshot(request_id=client.next_id(), run_name="r", spec=b'{"env_steps": 9}'),
                                  {"actor": np.frombuffer(data, np.uint8)})
        assert isinstance(reply, SnapshotSaved) and reply.created and reply.snapshot_id == snapshot_id(data)
        reply, arrays = client.request(LoadSnapshot(request_id=client.next_id(), run_name="r",
                                                    snapshot_id=reply.snapshot_id))
        assert isinstance(reply, SnapshotLoaded) and bytes(arrays["actor"]) == data
        assert msgspec.json.decode(reply.spec) == {"env_steps": 9}
        reply, _ = client.request(LoadSnapshot(request_id=client.next_id(), run_name="r", snapshot_id="0" * 16))
        assert isinstance(reply, NotFound)
        # Snapshots live apart from checkpoints: a prune of checkpoints never sees them.
        assert (tmp_path / "r" / "snapshots").is_dir() and not (tmp_path / "r" / "checkpoints").exists()
    finally:
        stop.set()
        thread.join(5)
        client.close()
        sock.close(0)
