"""``royalefleet bench --wire``: what wire codec 2 (shared/codec.py) costs and saves.

Three parts, each printed side by side:

* the codec alone on real rounds: one shard's battles (``rollout.battles / rollout.shards``)
  stepped with both seats played by ``RandomLegalOpponent(p)`` for each no-op probability p of
  ``PLAY_NOOP_PROBS``: 0.0 plays a card whenever one is legal and so spends elixir as it comes
  (nine rows in ten forced, as in a real iteration), 0.9 (the preflight's player) lets elixir
  pile up (about half the rows have choices, more units on the board: the figures err high).
  Every seat is packed as a rollout packs it, one round per decision. Per codec: wire bytes per
  row (the round's arrays, per-slot scalars included) as the mean and the 99th percentile over
  rounds, and microseconds per row to encode (rollout: ``compress_round``) and decode (learner:
  ``decompress_round``, checks included). Then what legality costs a row each way: seed 000's
  CSR (``legal_ids`` int16, ``legal_offsets`` int32) raw and zstd-compressed, against the packed
  mask bits inside the codec-2 frame (the frame's size with them less its size without);
* a rollout shard alone (``rollout_rate``): the same battles stepped, packed and (codec 2)
  compressed, alternating codecs round by round, so the load of a shared machine falls on both;
* the stack on real battles (``royalefleet up``, the config's profile) with ``services.wire_codec``
  1 and 2 in turn, ``repeats`` times each, interleaved (1, 2, 1, 2, ...) so that a change in the
  machine's load falls on both sides: collection rate (learner rows/s), decisions/s, and the
  learner's own figures of each real iteration (``throughput/wire_*`` of its metric rows). The
  first iteration of each stack is left out when there are more.

A figure, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import time

import msgspec
import numpy as np

from shared.config import RunConfig

PLAY_NOOP_PROBS = (0.0, 0.9)
ROUNDS = 200



def _step_all(envs, obs: list, player, rng) -> None:
    """One decision in every battle, both seats by ``player``; an ended battle starts a new
    episode. ``obs`` (one dict of both seats' observations per battle) is updated in place."""
    for i, env in enumerate(envs):
        acts = {s: player.act(obs[i][s], obs[i][s]["action_mask"], rng) for s in ("blue", "red")}
        o, _, term, trunc, _ = env.step(acts)
        if term["blue"] or trunc["blue"]:
            o, _ = env.reset(seed=int(rng.integers(2**62)))
        obs[i] = o

def real_rounds(cfg: RunConfig, codec, noop_prob: float, n_rounds: int = ROUNDS, seed: int = 7) -> list[dict]:
    """``n_rounds`` codec-1 round arrays of one shard of real battles, both seats played by
    ``RandomLegalOpponent(noop_prob)``."""
    from royalegym import RandomLegalOpponent

    from shared.envs import build_env

    per = max(1, cfg.rollout.battles // cfg.rollout.shards)
    rng = np.random.default_rng(seed)
    player = RandomLegalOpponent(noop_prob)
    envs = [build_env(cfg.env) for _ in range(per)]
    obs = [e.reset(seed=int(rng.integers(2**62)))[0] for e in envs]
    rounds = []
    n = 2 * per
    for _ in range(n_rounds):
        seats = [o[s] for o in obs for s in ("blue", "red")]
        rows, _, _ = codec.pack_many(seats)
        rounds.append({
            "group": np.zeros(n, np.int8), "tick": np.zeros(n, np.int32), "ordinal": np.zeros(n, np.int32),
            "rows": rows, "reward": np.zeros(n, np.float32), "terminated": np.zeros(n, np.uint8),
            "truncated": np.zeros(n, np.uint8), "deploy_status": np.full(n, -1, np.int8),
            "final_slots": np.zeros(0, np.int16), "final_rows": rows[:0],
        })
        _step_all(envs, obs, player, rng)
    return rounds


def codec_figures(codec, rounds) -> dict:
    """Per codec: bytes per row (mean, p99 over rounds), encode and decode us per row; and the
    share of forced rows (only the no-op legal) in the sample."""
    from shared.codec import RowCompressor, RowDecompressor, compress_round, decompress_round

    comp, dec = RowCompressor(), RowDecompressor(codec.row_bytes, 64 << 20)
    out = {}
    n_rows = sum(len(r["rows"]) for r in rounds)
    raw = [sum(a.nbytes for a in r.values()) / len(r["rows"]) for r in rounds]
    sizes, t_enc, t_dec, c_enc, c_dec = [], 0.0, 0.0, 0.0, 0.0
    for r in rounds:
        t0, c0 = time.perf_counter(), time.thread_time()
        sent = compress_round(r, comp)
        t1, c1 = time.perf_counter(), time.thread_time()
        back = decompress_round(sent, dec)
        t2, c2 = time.perf_counter(), time.thread_time()
        if back["rows"].tobytes() != r["rows"].tobytes():
            raise SystemExit("bench: codec 2 did not give back the rows it was given")
        t_enc, t_dec = t_enc + t1 - t0, t_dec + t2 - t1
        c_enc, c_dec = c_enc + c1 - c0, c_dec + c2 - c1
        sizes.append(sum(a.nbytes for a in sent.values()) / len(r["rows"]))
    out[1] = {"mean": float(np.mean(raw)), "p99": float(np.percentile(raw, 99)), "enc_us": 0.0, "dec_us": 0.0,
              "enc_cpu_us": 0.0, "dec_cpu_us": 0.0}
    out[2] = {"mean": float(np.mean(sizes)), "p99": float(np.percentile(sizes, 99)),
              "enc_us": 1e6 * t_enc / n_rows, "dec_us": 1e6 * t_dec / n_rows,
              "enc_cpu_us": 1e6 * c_enc / n_rows, "dec_cpu_us": 1e6 * c_dec / n_rows}
    legal = np.concatenate([np.unpackbits(r["rows"][:, codec.omask:], axis=1, bitorder="little").sum(axis=1)
                            for r in rounds])
    out["forced_frac"] = float(np.mean(legal == 1))
    out["rows"] = n_rows
    out["rows_per_round"] = n_rows / len(rounds)
    out["legality"] = legality_bytes(codec, rounds)
    return out


def legality_bytes(codec, rounds) -> dict[str, float]:
    """Bytes a row that legality costs: seed 000's CSR raw and zstd-compressed (level
    ``ZSTD_LEVEL``, one frame per array and round, as codec 2 ships arrays), and the packed mask
    bits inside the codec-2 frame (its size with them less its size without)."""
    from shared.codec import RowCompressor

    comp = RowCompressor()
    raw = packed = in_frame = 0
    n_rows = 0
    for r in rounds:
        rows = r["rows"]
        mask = np.unpackbits(rows[:, codec.omask:], axis=1, count=codec.table.n_actions, bitorder="little")
        row_of, ids = np.nonzero(mask)  # head frame: 0 the no-op, 1 + slot * H * W + y * W + x
        offsets = np.concatenate([[0], np.cumsum(np.bincount(row_of, minlength=len(rows)))]).astype(np.int32)
        ids = ids.astype(np.int16)
        raw += ids.nbytes + offsets.nbytes
        packed += comp.compress(ids.view(np.uint8)[None]).nbytes + comp.compress(offsets.view(np.uint8)[None]).nbytes
        in_frame += comp.compress(rows).nbytes - comp.compress(np.ascontiguousarray(rows[:, : codec.omask])).nbytes
        n_rows += len(rows)
    return {"csr_raw": raw / n_rows, "csr_zstd": packed / n_rows, "mask_in_frame": in_frame / n_rows}


def rollout_rate(cfg: RunConfig, codec, n_rounds: int = ROUNDS, seed: int = 11) -> dict[int, dict[str, float]]:
    """A rollout shard's own rate on each codec, alternating round by round on the same battles
    (so a change in the machine's load falls on both alike): per round, step every battle one
    decision (both seats random-legal, no-op probability 0), pack both seats' rows, and under
    codec 2 compress them as ``compress_round`` does. wire codec -> rows/s by wall time and by
    this thread's CPU time."""
    from royalegym import RandomLegalOpponent

    from shared.codec import RowCompressor, compress_round
    from shared.envs import build_env

    per = max(1, cfg.rollout.battles // cfg.rollout.shards)
    rng = np.random.default_rng(seed)
    player = RandomLegalOpponent(0.0)
    envs = [build_env(cfg.env) for _ in range(per)]
    obs = [e.reset(seed=int(rng.integers(2**62)))[0] for e in envs]
    comp = RowCompressor()
    wall = {1: 0.0, 2: 0.0}
    cpu = {1: 0.0, 2: 0.0}
    rows = {1: 0, 2: 0}
    for k in range(2 * n_rounds):
        wire = 1 + k % 2
        t0, c0 = time.perf_counter(), time.thread_time()
        _step_all(envs, obs, player, rng)
        packed, _, _ = codec.pack_many([o[s] for o in obs for s in ("blue", "red")])
        if wire == 2:
            compress_round({"rows": packed, "final_rows": packed[:0]}, comp)
        wall[wire] += time.perf_counter() - t0
        cpu[wire] += time.thread_time() - c0
        rows[wire] += len(packed)
    return {w: {"wall": rows[w] / wall[w], "cpu": rows[w] / cpu[w]} for w in (1, 2)}


def stack_figures(cfg: RunConfig, iterations: int, repeats: int, say) -> dict[int, list[dict]]:
    """wire codec -> the metric rows of its stacks (first iteration of each dropped when there
    are more), the stacks run 1, 2, 1, 2, ..."""
    from royalefleet.bench import stack_speed

    rows: dict[int, list[dict]] = {1: [], 2: []}
    for k in range(repeats):
        for codec in (1, 2):
            say(f"  stack {2 * k + codec} of {2 * repeats}: wire codec {codec}, {iterations} iteration(s) ...")
            side = msgspec.structs.replace(cfg, services=msgspec.structs.replace(cfg.services, wire_codec=codec))
            got = stack_speed(side, iterations, say)
            rows[codec].extend(got[1:] or got)
    return rows


def _mean(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if key in r]
    return sum(vals) / len(vals) if vals else float("nan")


def run_wire_bench(cfg: RunConfig, *, iterations: int, repeats: int = 1, stack: bool = True, say=print) -> int:
    """Prints both tables (the module docstring); ``stack`` False: the codec alone."""
    from shared.codec import ZSTD_LEVEL

    from shared.preflight import run_preflight

    say(f"wire bench: profile {cfg.profile}, shard of {max(1, cfg.rollout.battles // cfg.rollout.shards)} battles, "
        f"zstd level {ZSTD_LEVEL}")
    codec = run_preflight(cfg.env, cfg.master_seed).codec
    for noop_prob in PLAY_NOOP_PROBS:
        say(f"the codec alone on {ROUNDS} real rounds, both seats random-legal with no-op probability {noop_prob} ...")
        f = codec_figures(codec, real_rounds(cfg, codec, noop_prob))
        say(f"  {f['rows']} rows, {f['rows_per_round']:.0f} a round, forced (only the no-op legal) {f['forced_frac']:.2f}")
        say(f"{'':<44}{'codec 1':>12}{'codec 2':>12}")
        say(f"{'wire bytes per row, mean':<44}{f[1]['mean']:>12,.0f}{f[2]['mean']:>12,.0f}")
        say(f"{'wire bytes per row, p99 over rounds':<44}{f[1]['p99']:>12,.0f}{f[2]['p99']:>12,.0f}")
        say(f"{'encode us per row (rollout), wall':<44}{f[1]['enc_us']:>12.1f}{f[2]['enc_us']:>12.1f}")
        say(f"{'encode us per row (rollout), CPU':<44}{f[1]['enc_cpu_us']:>12.1f}{f[2]['enc_cpu_us']:>12.1f}")
        say(f"{'decode us per row (learner), wall':<44}{f[1]['dec_us']:>12.1f}{f[2]['dec_us']:>12.1f}")
        say(f"{'decode us per row (learner), CPU':<44}{f[1]['dec_cpu_us']:>12.1f}{f[2]['dec_cpu_us']:>12.1f}")
        g = f["legality"]
        say(f"  legality, bytes a row: CSR raw {g['csr_raw']:.1f}, CSR zstd {g['csr_zstd']:.1f}, "
            f"mask bits inside the codec-2 frame {g['mask_in_frame']:.1f}")
        say("")
    say(f"a rollout shard alone, {ROUNDS} rounds on each codec, alternating round by round ...")
    r = rollout_rate(cfg, codec)
    say(f"{'':<44}{'codec 1':>12}{'codec 2':>12}{'2 / 1':>8}")
    for label, key in (("shard rows/s (step + pack + compress), wall", "wall"), ("shard rows/s, CPU time", "cpu")):
        say(f"{label:<44}{r[1][key]:>12,.0f}{r[2][key]:>12,.0f}{r[2][key] / r[1][key]:>8.3f}")
    say("")
    if not stack:
        return 0
    say(f"the stack, codec 1 and 2 interleaved, {repeats} stack(s) each ...")
    rows = stack_figures(cfg, max(1, iterations), repeats, say)
    say("")
    say(f"{'the stack, real iterations':<44}{'codec 1':>12}{'codec 2':>12}{'2 / 1':>8}")
    for label, key, fmt, ratio in (
        ("collection, learner rows/s", "throughput/collected_steps_per_second", ",.1f", True),
        ("collection, decisions/s", "throughput/env_steps_per_second", ",.1f", True),
        ("wire bytes per row (mean over the iteration)", "throughput/wire_bytes_per_row", ",.0f", True),
        ("encode us per row (rollout CPU)", "throughput/wire_encode_us_per_row", ".1f", False),
        ("decode us per row (learner CPU)", "throughput/wire_decode_us_per_row", ".1f", False),
        ("learner wait share of collection", "throughput/parent_wait_frac", ".2f", False),
    ):
        a, b = _mean(rows[1], key), _mean(rows[2], key)
        say(f"{label:<44}{a:>12{fmt}}{b:>12{fmt}}" + (f"{b / a:>8.3f}" if ratio and a > 0 else ""))
    say(f"  iterations timed: codec 1 {len(rows[1])}, codec 2 {len(rows[2])}; per iteration, codec 1: "
        + ", ".join(f"{r['throughput/collected_steps_per_second']:.1f}" for r in rows[1]) + "; codec 2: "
        + ", ".join(f"{r['throughput/collected_steps_per_second']:.1f}" for r in rows[2]) + " learner rows/s")
    return 0
