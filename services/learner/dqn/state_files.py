"""The DQN learner's replay and open windows as checkpoint files (the same rules as
``services/learner/checkpointing.py``: safetensors for arrays, msgspec JSON for the rest, no
pickle), so a resume continues the same buffer and every open window.

==========================  ================================================================
file                        what
==========================  ================================================================
``replay/arrays.safetensors.zst``  the stored prefix of every record array and its priorities,
                               one zstd frame (packed rows are mostly zero bytes: ~15 KB a row
                               compresses ~50-fold, so a replay fits a checkpoint message)
``replay/state.json``          size, cursor, insertion clock, running max, capacity, row bytes, heads
``windows/pending.safetensors`` every slot's open decisions, concatenated in slot order
``windows/pending.json``        slots and their open-decision counts
==========================  ================================================================

The sum tree is not stored: it is rebuilt from the priorities on load (p^alpha, summed in the
same order, so the same sampling).
"""

from __future__ import annotations

import msgspec
import numpy as np
import zstandard
from safetensors.numpy import load as st_load, save as st_save

from services.learner.dqn.replay import PrioritizedReplay
from services.learner.dqn.windows import WindowBuilder

REPLAY_FILES = ("replay/arrays.safetensors.zst", "replay/state.json")
MAX_REPLAY_BYTES = 1 << 36
"""The most a replay's arrays may expand to on load (a frame declaring more is refused)."""
WINDOW_FILES = ("windows/pending.safetensors", "windows/pending.json")


def replay_to_files(replay: PrioritizedReplay) -> dict[str, bytes]:
    state = replay.state_dict()
    arrays = {name: np.ascontiguousarray(state.pop(name)) for name in PrioritizedReplay._ARRAYS}
    # safetensors has no bool dtype in numpy's sense: flags travel as uint8.
    arrays = {k: (v.astype(np.uint8) if v.dtype == bool else v) for k, v in arrays.items()}
    frame = zstandard.ZstdCompressor(level=1, write_content_size=True, write_checksum=True).compress(st_save(arrays))
    return {REPLAY_FILES[0]: frame, REPLAY_FILES[1]: msgspec.json.encode(state, order="sorted")}


def replay_from_files(replay: PrioritizedReplay, files: dict[str, bytes]) -> None:
    """Load into ``replay`` (built from this run's config). Raises ValueError when the files
    were written by a buffer of another capacity, row size or head count."""
    state = msgspec.json.decode(files[REPLAY_FILES[1]])
    frame = files[REPLAY_FILES[0]]
    size = zstandard.frame_content_size(frame)
    if size < 0 or size > MAX_REPLAY_BYTES:
        raise ValueError(f"{REPLAY_FILES[0]}: the frame declares {size} bytes; refused (at most {MAX_REPLAY_BYTES})")
    arrays = st_load(zstandard.ZstdDecompressor().decompress(frame, max_output_size=size))
    for name in ("can_bootstrap", "dones"):
        arrays[name] = arrays[name].astype(bool)
    replay.load_state_dict({**state, **arrays})


def windows_to_files(builder: WindowBuilder) -> dict[str, bytes]:
    state = builder.state_dict()
    slots = sorted(state)
    flat = [d for s in slots for d in state[s]]
    arrays: dict[str, np.ndarray] = {
        "rows": np.stack([d[0] for d in flat]).astype(np.uint8) if flat else np.zeros((0, builder.row_bytes), np.uint8),
        "actions": np.array([d[1] for d in flat], np.int64),
        "rewards": np.array([d[2] for d in flat], np.float64),
        "players": np.array([d[3] for d in flat], np.int64),
        "heads": np.array([d[4] for d in flat], np.int64),
        "epsilons": np.array([d[5] for d in flat], np.float64),
    }
    meta = {"slots": slots, "counts": [len(state[s]) for s in slots], "n": builder.n, "gamma": builder.gamma}
    return {WINDOW_FILES[0]: st_save(arrays), WINDOW_FILES[1]: msgspec.json.encode(meta)}


def windows_from_files(builder: WindowBuilder, files: dict[str, bytes]) -> None:
    meta = msgspec.json.decode(files[WINDOW_FILES[1]])
    if meta["n"] != builder.n:
        raise ValueError(f"open windows were written with n_step {meta['n']}, this run has {builder.n}: resume with "
                         "the same dqn.n_step")
    builder.gamma = float(meta["gamma"])  # the schedule's value the windows were being summed with
    a = st_load(files[WINDOW_FILES[0]])
    state, i = {}, 0
    for slot, count in zip(meta["slots"], meta["counts"]):
        state[slot] = [(a["rows"][j], int(a["actions"][j]), float(a["rewards"][j]), int(a["players"][j]),
                        int(a["heads"][j]), float(a["epsilons"][j])) for j in range(i, i + count)]
        i += count
    builder.load_state_dict(state)
