"""Demonstrations: a teacher's recorded decisions, stored as shards in seed 000's CSR form.

A demonstration set is one folder ``<runs_dir>/<run>/demos/<name>/`` written by ``royalefleet
demos record`` (royalefleet/cmd_demos.py) and read by ``royalefleet clone``:

* ``shard-<k>.npz.zst`` (k = 00000, 00001, ...): zstd of an ``np.savez`` of numpy arrays of the
  rows of some whole battles,
  one row per decision of a recorded seat (``SHARD_ARRAYS`` says what each holds, with its
  dtype and shape), plus ``meta``: the JSON of the digests the rows were packed under, so a
  shard carried to another run is refused by itself, not only through its manifest.
* ``manifest.json``: ``DemoManifest``, the teachers, battles, seeds, engine build, env and
  codec digests, counts, and the sha256 of every shard file.

Every file is written through ``shared.durable`` (data fsynced, then renamed into place): the
set is written in ``<name>.partial/`` and renamed to ``<name>/`` once its manifest is down, so
a reader never sees half a set. Legality is stored as CSR (compressed sparse row: the legal
ids of row i are ``legal_ids[legal_offsets[i]:legal_offsets[i + 1]]``, head frame, sorted,
the no-op included), as seed 000's batches store it, beside the packed row (whose mask bits
say the same thing; ``check_shard`` verifies that they do).

Torch-free: the recorder's worker processes import it.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Literal, get_args

import msgspec
import numpy as np

from shared.messages import EngineBuild

DEMOS_FORMAT = 1
"""Bumped whenever a shard's arrays or the manifest change meaning; another format is refused."""
MANIFEST = "manifest.json"
SHARD_TEMPLATE = "shard-{:05d}.npz.zst"
SHARD_ZSTD_LEVEL = 1
"""zstd level of a shard file: rows are mostly zero planes (measured: about 1/20 of the raw npz here)."""
NOOP = 0

SHARD_ARRAYS = {
    # name: (dtype, shape in terms of n rows / nnz legal ids)
    "observations": ("uint8", "(n, row_bytes)"),  # packed by shared.codec exactly as a rollout packs
    "actions": ("int64", "(n,)"),  # the teacher's action in the head frame
    "action_legal": ("bool", "(n,)"),  # the action is legal under the row's mask
    "legal_ids": ("int16", "(nnz,)"),  # CSR ids, head frame, sorted, no-op included
    "legal_offsets": ("int32", "(n + 1,)"),
    "returns": ("float32", "(n,)"),  # the seat's discounted return-to-go from this decision
    "outcomes": ("int8", "(n,)"),  # the seat's episode outcome: +1 won, -1 lost, 0 draw or truncated
    "battles": ("int64", "(n,)"),  # the battle id (one episode: ordinal 0 of that battle)
    "seats": ("int8", "(n,)"),  # 0 blue, 1 red
    "decisions": ("int32", "(n,)"),  # the decision's index in its episode, from 0
    "forced": ("bool", "(n,)"),  # only the no-op was legal (carries nothing for the actor)
}
"""Every array of a shard (besides ``meta``), its dtype and shape."""

SEARCH_ARRAYS = {
    # a searching teacher's scores, CSR like the legal ids: row i searched the m_i candidates
    # search_actions[search_offsets[i]:search_offsets[i + 1]] (m_i = 0: the row was not searched)
    "search_offsets": ("int32", "(n + 1,)"),
    "search_actions": ("int16", "(m,)"),  # the candidates, head frame, the teacher's own pick first
    "search_means": ("float32", "(m,)"),  # each candidate's mean playout score, the search's scale
    "search_visits": ("int16", "(m,)"),  # playouts each candidate got (sequential halving cuts the losers)
    "search_keep": ("float32", "(n,)"),  # the search's keep: its own pick is played unless beaten by more
}
"""The arrays a shard also holds when one of its battles' teachers searched (all of them, or
none): what ``royalefleet clone --soft-tau`` and ``--margin-weight`` train on. Rows of a teacher that did not
search have no candidates."""


BetaDecay = Literal["linear", "none"]
BETA_DECAYS = get_args(BetaDecay)
"""DAgger's schedules of the apprentice's share over a set (services/rollout/demos.py
``dagger_beta``): "linear", beta at the first battle decaying to 0 at the last (Ross, Gordon and
Bagnell 2011 let beta fall over iterations), or "none", beta in every battle (a constant mixture:
what following a share of the teacher's decisions is worth, measured at one share)."""


class DemosError(ValueError):
    """A demonstration set or shard that cannot be read into this run; the text names the file
    and, for a digest, the field and both values."""

    def __init__(self, text: str, fields: tuple[str, ...] = ()):
        self.fields = fields
        super().__init__(text)


class DemoDigests(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the rows were packed under; a run reads them only when every field is its own."""

    env_spec_digest: str
    obs_digest: str
    codec_table_digest: str
    codec_version: int
    row_bytes: int


class ShardEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    file: str
    sha256: str
    rows: int
    choice_rows: int
    battles: list[int]


class BattleEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One recorded episode: battle ``battle`` (ordinal 0), its env seed, who played."""

    battle: int
    env_seed: int
    teacher: str
    opponent: str
    recorded_seats: list[int]
    outcome: list[int]
    """Per recorded seat (same order): +1 won, -1 lost, 0 draw/truncated."""
    decisions: int


class DemoManifest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    format: int = DEMOS_FORMAT
    name: str
    run_name: str
    teachers: list[str]
    opponents: list[str]
    master_seed: int
    seed_rule: str
    """How a battle's env seed derives from the master seed (shared.seeding stream path)."""
    gamma: float
    engine: EngineBuild
    digests: DemoDigests
    battles: list[BattleEntry]
    shards: list[ShardEntry]
    rows: int
    choice_rows: int
    forced_rows: int
    illegal_actions: int
    """Rows whose teacher action is not legal under our mask (kept, flagged ``action_legal``)."""
    remapped_actions: int
    """Rows whose parser index differed from our head-frame index (``head_action``)."""
    workers: int
    seconds: float
    apprentice: str = ""
    """DAgger: who played a share of the recorded decisions (the teacher labelled all); "" none."""
    beta: float = 0.0
    """DAgger: the apprentice's share at the first battle, decaying linearly to 0 at the last
    (``beta_decay`` "linear"), or in every battle ("none")."""
    beta_decay: BetaDecay = "linear"
    """DAgger: ``BETA_DECAYS`` (a manifest with another value is refused when read)."""

    @property
    def digest(self) -> str:
        """sha256 (16 hex) of the shards' sha256s in order: the set's content digest."""
        return hashlib.sha256("".join(s.sha256 for s in self.shards).encode()).hexdigest()[:16]


def head_action(slot: int, x: int, y: int, *, height: int, width: int) -> int:
    """The head-frame index of playing hand slot ``slot`` on tile (x, y) of the acting seat's own
    frame: ``1 + slot * height * width + y * width + x`` (0 is the no-op). RoyaleGym's
    ``TileActionParser.encode(slot, x, y)`` uses the same layout; ``teacher_action`` checks it
    per row rather than trusting it. Raises ValueError for a tile or slot off the grid."""
    if not (0 <= x < width and 0 <= y < height and slot >= 0):
        raise ValueError(f"tile (x={x}, y={y}) slot {slot} is off the {width}x{height} grid")
    return 1 + slot * height * width + y * width + x


def teacher_action(action: int, parser, *, height: int, width: int, n_grid: int) -> int:
    """The head-frame index of a teacher's ``action`` (RoyaleGym's parser index): the no-op stays
    0, a grid action is decoded by the parser (``decode(a) -> (slot, x, y)``) and re-encoded by
    ``head_action``, an index past the grid (an ability button) is kept (buttons follow the grid
    in both frames)."""
    if action == NOOP or action >= n_grid:
        return int(action)
    slot, x, y = parser.decode(int(action))
    return head_action(int(slot), int(x), int(y), height=height, width=width)


def csr_from_masks(masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, A) bool -> (legal_ids (nnz,) int16, legal_offsets (n + 1,) int32), row-major, so each
    row's ids are sorted. Raises ValueError when A does not fit int16."""
    if masks.shape[1] > np.iinfo(np.int16).max + 1:
        raise ValueError(f"{masks.shape[1]} actions do not fit int16 legal ids")
    rows, cols = np.nonzero(masks)
    offsets = np.zeros(masks.shape[0] + 1, np.int32)
    np.cumsum(np.bincount(rows, minlength=masks.shape[0]), out=offsets[1:])
    return cols.astype(np.int16), offsets


def csr_contains(legal_ids: np.ndarray, legal_offsets: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """(n,) bool: whether ``actions[i]`` is among row i's legal ids."""
    out = np.zeros(len(actions), bool)
    for i, a in enumerate(actions):
        out[i] = bool(np.any(legal_ids[legal_offsets[i] : legal_offsets[i + 1]] == a))
    return out


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """(T,) float32 return-to-go ``G_t = r_t + gamma G_{t+1}`` (``G_T = 0``), in float64 inside."""
    out = np.zeros(len(rewards), np.float64)
    acc = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        acc = float(rewards[t]) + gamma * acc
        out[t] = acc
    return out.astype(np.float32)


def shard_bytes(arrays: dict[str, np.ndarray], digests: DemoDigests) -> bytes:
    """One shard file's bytes (zstd of the ``np.savez`` of ``arrays`` and ``meta``). Raises ValueError for a
    missing or extra array, a wrong dtype, or lengths that do not agree."""
    check_arrays(arrays, digests.row_bytes)
    import zstandard

    buf = io.BytesIO()
    np.savez(buf, meta=np.frombuffer(msgspec.json.encode(digests), np.uint8),
             **{k: np.ascontiguousarray(arrays[k]) for k in (*SHARD_ARRAYS, *SEARCH_ARRAYS) if k in arrays})
    return zstandard.ZstdCompressor(level=SHARD_ZSTD_LEVEL, write_checksum=True).compress(buf.getvalue())


def check_arrays(arrays: dict[str, np.ndarray], row_bytes: int) -> None:
    """The CSR and shape invariants of a shard's arrays; ValueError naming the first that fails."""
    search = set(SEARCH_ARRAYS) & set(arrays)
    if set(arrays) != set(SHARD_ARRAYS) | (set(SEARCH_ARRAYS) if search else set()):
        raise ValueError(f"shard arrays {sorted(arrays)}; expected {sorted(SHARD_ARRAYS)}, and all or none of "
                         f"{sorted(SEARCH_ARRAYS)}")
    for name, (dtype, _) in (SHARD_ARRAYS | (SEARCH_ARRAYS if search else {})).items():
        if arrays[name].dtype != np.dtype(dtype):
            raise ValueError(f"shard array {name} is {arrays[name].dtype}, expected {dtype}")
    n = len(arrays["actions"])
    obs = arrays["observations"]
    if obs.shape != (n, row_bytes):
        raise ValueError(f"observations of shape {obs.shape}; expected ({n}, {row_bytes})")
    for name in ("action_legal", "returns", "outcomes", "battles", "seats", "decisions", "forced"):
        if arrays[name].shape != (n,):
            raise ValueError(f"shard array {name} of shape {arrays[name].shape}; expected ({n},)")
    off, ids = arrays["legal_offsets"], arrays["legal_ids"]
    if off.shape != (n + 1,) or off[0] != 0 or off[-1] != len(ids) or np.any(np.diff(off) < 1):
        raise ValueError("legal_offsets must be (n + 1,), start at 0, end at len(legal_ids) and give every row "
                         "at least one legal id (the no-op)")
    if n and not np.all(ids[off[:-1]] == NOOP):
        raise ValueError("every row's first legal id must be the no-op (0): ids are sorted and the no-op is legal")
    if not np.array_equal(arrays["forced"], np.diff(off) == 1):
        raise ValueError("forced must be exactly the rows whose only legal id is the no-op")
    if search:
        s_off, m = arrays["search_offsets"], len(arrays["search_actions"])
        if s_off.shape != (n + 1,) or s_off[0] != 0 or s_off[-1] != m or np.any(np.diff(s_off) < 0):
            raise ValueError("search_offsets must be (n + 1,), start at 0, end at len(search_actions) and never fall")
        for name in ("search_means", "search_visits"):
            if arrays[name].shape != (m,):
                raise ValueError(f"shard array {name} of shape {arrays[name].shape}; expected ({m},)")
        if arrays["search_keep"].shape != (n,):
            raise ValueError(f"shard array search_keep of shape {arrays['search_keep'].shape}; expected ({n},)")


MAX_SHARD_BYTES = 1 << 31
"""The most a shard may decompress to (2 GiB: the zstd frame, and the npz's members together);
a shard set that needs more is recorded in more shards."""


def decompress_capped(data: bytes, where: str, cap: int = MAX_SHARD_BYTES) -> bytes:
    """The zstd frame ``data`` decompressed, streamed, stopping as soon as the output would pass
    ``cap`` bytes, whatever size the frame declares (a decompression bomb costs at most ``cap``
    bytes of memory). Raises DemosError naming ``where`` for a bomb or a frame that is not zstd."""
    import zstandard

    out = io.BytesIO()
    try:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
            while chunk := reader.read(1 << 20):
                if out.tell() + len(chunk) > cap:
                    raise DemosError(f"{where}: decompresses past {cap:,} bytes (MAX_SHARD_BYTES); refused as a "
                                     "decompression bomb: record the set again, in smaller shards")
                out.write(chunk)
    except zstandard.ZstdError as exc:
        raise DemosError(f"{where}: not a zstd shard: {exc}") from None
    return out.getvalue()


def npz_within(raw: bytes, where: str, cap: int = MAX_SHARD_BYTES) -> None:
    """DemosError naming ``where`` when the npz ``raw``'s members declare more than ``cap`` bytes
    together (a deflated member is a bomb of its own: zipfile reads a member up to its declared
    size) or ``raw`` is no zip."""
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            total = sum(info.file_size for info in z.infolist())
    except (zipfile.BadZipFile, ValueError) as exc:
        raise DemosError(f"{where}: not an npz shard: {exc}") from None
    if total > cap:
        raise DemosError(f"{where}: its arrays declare {total:,} bytes, past {cap:,} (MAX_SHARD_BYTES); refused as "
                         "a decompression bomb: record the set again, in smaller shards")


def read_shard(path: Path, expected_sha256: str | None, digests: DemoDigests, *,
               max_bytes: int = MAX_SHARD_BYTES) -> dict[str, np.ndarray]:
    """A shard's arrays, its bytes verified against ``expected_sha256`` (when given) and its
    ``meta`` against ``digests`` (the run's). Raises DemosError naming the file and, for a
    digest, every field that differs with both values; for a shard that decompresses past
    ``max_bytes`` (``decompress_capped``, ``npz_within``)."""
    data = Path(path).read_bytes()
    if expected_sha256 is not None and hashlib.sha256(data).hexdigest() != expected_sha256:
        raise DemosError(f"{path}: sha256 {hashlib.sha256(data).hexdigest()} is not the manifest's {expected_sha256} "
                         "(the file changed after it was recorded; record it again)")
    raw = decompress_capped(data, str(path), max_bytes)
    npz_within(raw, str(path), max_bytes)
    with np.load(io.BytesIO(raw), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = msgspec.json.decode(arrays.pop("meta").tobytes(), type=DemoDigests)
    refuse_digests(str(path), meta, digests)
    try:
        check_arrays(arrays, digests.row_bytes)
    except ValueError as exc:
        raise DemosError(f"{path}: {exc}") from None
    return arrays


def refuse_digests(where: str, theirs: DemoDigests, ours: DemoDigests) -> None:
    """DemosError naming every field of ``theirs`` that differs from ``ours`` (with both values)."""
    wrong = [(f, getattr(theirs, f), getattr(ours, f)) for f in DemoDigests.__struct_fields__
             if getattr(theirs, f) != getattr(ours, f)]
    if wrong:
        text = "; ".join(f"{f} is {a!r}, this run's is {b!r}" for f, a, b in wrong)
        raise DemosError(f"{where}: recorded under another environment or codec: {text}. Record demonstrations "
                         "with this run's config (royalefleet demos record RUN)", tuple(f for f, _, _ in wrong))


def read_manifest(folder: Path) -> DemoManifest:
    """The set's manifest; DemosError naming the folder when it is missing or unreadable."""
    path = Path(folder) / MANIFEST
    try:
        manifest = msgspec.json.decode(path.read_bytes(), type=DemoManifest)
    except FileNotFoundError:
        raise DemosError(f"{folder}: no {MANIFEST} (not a demonstration set, or one whose recording did not "
                         "finish)") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise DemosError(f"{path}: not a demonstration manifest: {exc}") from None
    if manifest.format != DEMOS_FORMAT:
        raise DemosError(f"{path}: demonstrations format {manifest.format}; this build reads {DEMOS_FORMAT}")
    return manifest


def load_set(folder: Path, digests: DemoDigests) -> tuple[DemoManifest, dict[str, np.ndarray]]:
    """(manifest, every shard's arrays concatenated in manifest order). The manifest's digests
    and then each shard's are checked against the run's (``refuse_digests``), and each file's
    sha256 against the manifest. Raises DemosError."""
    manifest = read_manifest(folder)
    refuse_digests(str(Path(folder) / MANIFEST), manifest.digests, digests)
    parts = [read_shard(Path(folder) / s.file, s.sha256, digests) for s in manifest.shards]
    return manifest, concat_shards(parts)


def concat_shards(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Shards joined row-wise, the CSR offsets rebased."""
    if not parts:
        raise DemosError("no shards to read")
    out = {k: np.concatenate([p[k] for p in parts]) for k in SHARD_ARRAYS if k != "legal_offsets"}
    out["legal_offsets"] = _rebased([p["legal_offsets"] for p in parts])
    if any("search_offsets" in p for p in parts):  # a shard without them: no row of it searched
        parts = [p if "search_offsets" in p else {**p, **no_search(len(p["actions"]))} for p in parts]
        out |= {k: np.concatenate([p[k] for p in parts]) for k in SEARCH_ARRAYS if k != "search_offsets"}
        out["search_offsets"] = _rebased([p["search_offsets"] for p in parts])
    return out


def no_search(n: int) -> dict[str, np.ndarray]:
    """``SEARCH_ARRAYS`` for ``n`` rows none of which was searched."""
    return {"search_offsets": np.zeros(n + 1, np.int32), "search_actions": np.zeros(0, np.int16),
            "search_means": np.zeros(0, np.float32), "search_visits": np.zeros(0, np.int16),
            "search_keep": np.zeros(n, np.float32)}


def _rebased(offsets: list[np.ndarray]) -> np.ndarray:
    """CSR offsets of consecutive parts joined into one (each part's ids follow the last's)."""
    out, base = [np.zeros(1, np.int32)], 0
    for off in offsets:
        out.append(off[1:] + base)
        base += int(off[-1])
    return np.concatenate(out).astype(np.int32)
