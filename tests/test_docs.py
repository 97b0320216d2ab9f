"""The user docs (README.md, docs/*.md) against the code they describe.

* every repository path a doc names in backticks exists;
* no doc cites a file outside the repository (the handbook lives beside it);
* no ``royalefleet`` help text shows a doubled percent sign;
* docs/ladder.md's timeline arithmetic is what the ``cpu`` profile and the default gate give;
* docs/running.md's run-identity list names every digest ``shared/identity.py`` computes;
* README stays short (under 250 lines), says nothing only the team would understand, and every
  number it quotes from the measurement docs (docs/learning.md, docs/throughput.md) is in them.
"""

from __future__ import annotations

import math
import pathlib
import re

from shared.config import GateConfig, cpu
from shared.identity import config_digests
from shared.matchmaking import role_counts

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP_FOLDERS = ("deploy/", "services/", "shared/", "royalefleet/", "prometheus/", "grafana/", "docs/", "tests/",
               "docker/")


def repo_paths(text: str) -> list[str]:
    """First words of backticked spans that start with a top-level folder of the repository and
    hold no placeholder (``<run>``, ``{name}``, ``*``); ``path:line`` and trailing punctuation cut."""
    out = []
    for m in re.finditer(r"`([^`\n]+)`", text):
        words = m.group(1).split()
        if not words:
            continue
        word = words[0]
        if word.startswith(TOP_FOLDERS) and not re.search(r"[<>{}*]", word):
            out.append(word.split(":")[0].rstrip(".,;"))
    return out


def test_repo_paths_extracted_from_a_known_line():
    assert repo_paths("see `shared/nn/snapshot.py check_spec`, `runs/<run>/x`, `deploy/podman/compose`.") == [
        "shared/nn/snapshot.py", "deploy/podman/compose"]


def test_every_path_a_doc_names_exists():
    missing, seen = [], 0
    for doc in DOCS:
        for path in repo_paths(doc.read_text()):
            seen += 1
            if not (ROOT / path).exists():
                missing.append(f"{doc.relative_to(ROOT)}: {path}")
    assert seen > 50  # the extraction found the docs' references, so the check below means something
    assert missing == []


def test_no_doc_cites_a_file_outside_the_repository():
    for doc in DOCS:
        text = doc.read_text()
        for bad in ("../shared/", "shared/reference/"):
            assert bad not in text, f"{doc.relative_to(ROOT)} cites {bad!r}, which a checkout does not hold"


def test_no_help_text_shows_a_doubled_percent():
    from royalefleet.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert {"up", "eval", "gate", "rate"} <= set(sub.choices)
    for name, sp in sub.choices.items():
        assert "%%" not in sp.format_help(), f"royalefleet {name} --help prints '%%'"


def test_ladder_timeline_matches_the_cpu_profile():
    cfg = cpu()
    n = cfg.rollout.battles * cfg.local.rollouts
    mirror, _, _ = role_counts(tuple(cfg.ladder.mix), n)
    cycles = math.ceil(cfg.ppo.timesteps_per_iteration / (n + mirror))
    env_steps = cycles * n
    iterations = math.ceil(cfg.ladder.pool.candidate_every_env_steps / env_steps)
    matches = lambda g: g.champion_games + 2 * g.anchor_games + g.stratified_snapshots * g.stratified_games  # noqa: E731
    gate_matches, cpu_gate_matches = matches(GateConfig()), matches(cfg.ladder.gate)
    old_iterations = math.ceil(4_000_000 / env_steps)  # the reference's cadence, before issue 20
    assert (mirror, cycles, env_steps, iterations, old_iterations, gate_matches, cpu_gate_matches) == (
        8, 171, 2736, 37, 1462, 2200, 560)
    text = (ROOT / "docs" / "ladder.md").read_text()
    for number in ("2,736", "1,462", "2,200", "4,000,000", "100,000", "every 37 iterations",
                   "T = ceil(4,096 / 24) = 171", "200 + 200 + 160 = 560 on the `cpu` profile"):
        assert number in text


def test_running_doc_lists_every_identity_digest():
    text = (ROOT / "docs" / "running.md").read_text()
    for name in [*config_digests(cpu()), "master_seed", "determinism.tier", "determinism.torch_threads",
                 "rollout.mask_only_scripted", "local.rollouts"]:
        assert f"`{name}`" in text, name


def test_ladder_profile_table_matches_every_profile():
    from shared.config import PROFILES

    text = (ROOT / "docs" / "ladder.md").read_text()
    for name in ("cpu", "laptop", "workstation", "many_core"):
        cfg = PROFILES[name]()
        n = cfg.rollout.battles * cfg.local.rollouts
        mirror, _, _ = role_counts(tuple(cfg.ladder.mix), n)
        env_steps = math.ceil(cfg.ppo.timesteps_per_iteration / (n + mirror)) * n
        every = cfg.ladder.pool.candidate_every_env_steps
        first = math.ceil(every / env_steps)
        second = math.ceil(2 * every / env_steps)
        row = f"| `{name}` | {env_steps:,} | {every:,} | iteration {first}"
        assert row in text and f"iteration {second}" in text.split(row, 1)[1].split("\n", 1)[0], name


def test_readme_profile_table_matches_every_profile():
    """README's profile table: every numeric cell is the profile's own (shared/config.py PROFILES)."""
    from shared.config import PROFILES

    text = (ROOT / "README.md").read_text()
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[3:-1]]
            for line in text.splitlines() if line.startswith("| `")}
    for name in PROFILES:
        c, g = PROFILES[name](), PROFILES[name]().ladder.gate
        gate = g.champion_games + 2 * g.anchor_games + g.stratified_snapshots * g.stratified_games
        want = [f"{c.rollout.battles} x {c.local.rollouts}", f"{c.ppo.timesteps_per_iteration:,}",
                f"{c.net.channels} x {c.net.blocks}", str(c.determinism.torch_threads),
                f"{c.ladder.pool.candidate_every_env_steps:,}", f"{gate:,}"]
        assert rows.get(f"`{name}`") == want, (name, rows.get(f"`{name}`"), want)


MEASURED = ("docs/learning.md", "docs/throughput.md")
NUMBER = re.compile(r"(?<![\w.,])\d+(?:,\d{3})*(?:\.\d+)?(?:e-?\d+)?(?!\d)")
"""A number as prose writes it: ``4,104``, ``36.5``, ``1.3e-5``, ``0.58`` (units after it are fine)."""


def prose_blocks(text: str) -> list[str]:
    """``text``'s paragraphs (blank-line separated; a list is one), fenced code blocks and inline
    code spans left out: commands and their arguments are not quotes of a measurement."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return [re.sub(r"`[^`\n]*`", "", block) for block in re.split(r"\n\s*\n", text) if block.strip()]


def unquoted_numbers(text: str, docs: dict[str, str]) -> list[tuple[str, str]]:
    """(number, paragraph start) for every number of a paragraph of ``text`` that names one of
    ``docs`` (path -> its text) and is not a number of any doc that paragraph names. The
    convention: a README sentence that quotes a measurement names the doc it comes from in its
    paragraph."""
    doc_numbers = {path: set(NUMBER.findall(body)) for path, body in docs.items()}
    missing = []
    for block in prose_blocks(text):
        named = [path for path in docs if path in block]
        if not named:
            continue
        prose = block
        for path in named:
            prose = prose.replace(path, "")
        for number in NUMBER.findall(prose):
            if not any(number in doc_numbers[path] for path in named):
                missing.append((number, block.strip()[:60]))
    return missing


def test_the_number_check_finds_a_figure_its_doc_does_not_hold():
    docs = {"docs/throughput.md": "| whole run | 36.5 s | 4,104 rows | kl 1.3e-5 |"}
    text = ("An iteration takes 36.5 s for 4,104 rows, KL 1.3e-5 (docs/throughput.md).\n\n"
            "It took 99 s once (docs/throughput.md), `--games 200` aside.\n\n"
            "A paragraph naming no doc: 12 s.\n\n```\nbench --games 7 (docs/throughput.md)\n```\n")
    assert [number for number, _ in unquoted_numbers(text, docs)] == ["99"]
    assert NUMBER.findall("0.58 [0.48, 0.67], 1.078x, 30,000-80,000, 2-core, +-0.2") == [
        "0.58", "0.48", "0.67", "1.078", "30,000", "80,000", "2", "0.2"]


def test_readme_numbers_are_the_measurement_docs_own():
    text = (ROOT / "README.md").read_text()
    docs = {path: (ROOT / path).read_text() for path in MEASURED}
    assert unquoted_numbers(text, docs) == []
    # the check reads the paragraphs that say what to expect: the quiet iteration and the strength
    checked = {n for block in prose_blocks(text) if any(p in block for p in MEASURED) for n in NUMBER.findall(block)}
    assert {"36.5", "23.3", "114", "0.575", "0.58"} <= checked, checked


def test_readme_is_short_and_speaks_to_a_user():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 250
    inside = re.findall(r"\bissues? \d+|\bthe issue\b|handbook|royalelearn-facts|royalegym-notes|seed 000|§|"
                        r"\bsession \d+|this project's", text, flags=re.I)
    assert inside == []
