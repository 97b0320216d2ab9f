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

import pytest

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
    assert {"36.5", "23.3", "114", "0.4725", "0.505"} <= checked, checked


def test_readme_is_short_and_speaks_to_a_user():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 250
    inside = re.findall(r"\bissues? \d+|\bthe issue\b|handbook|royalelearn-facts|royalegym-notes|seed 000|§|"
                        r"\bsession \d+|this project's", text, flags=re.I)
    assert inside == []


def test_readme_and_the_docs_agree_where_a_newcomer_compared_them(tmp_path):
    """The contradictions a newcomer found between README, the docs and the help texts, pinned."""
    from royalefleet.cli import build_parser
    from royalefleet.players import resolve
    from shared.config import load_config

    readme = " ".join((ROOT / "README.md").read_text().split())  # prose reflowed: one space between words
    doc = {p: " ".join((ROOT / "docs" / p).read_text().split()) for p in ("throughput.md", "learning.md", "search.md", "strength.md",
                                                        "watching.md", "kubernetes.md")}
    cfg = cpu()
    # timesteps: the profile's target (the table) and the whole rounds it gives (the prose, the docs)
    n = cfg.rollout.battles * cfg.local.rollouts
    per_round = n + role_counts(tuple(cfg.ladder.mix), n)[0]
    trained = math.ceil(cfg.ppo.timesteps_per_iteration / per_round) * per_round
    assert f"| {cfg.ppo.timesteps_per_iteration:,} |" in readme
    assert f"({trained:,} learner timesteps: the profile's {cfg.ppo.timesteps_per_iteration:,} in whole rounds of " \
           f"{per_round} rows)" in readme
    assert f"{trained:,} learner timesteps" in doc["throughput.md"] and f"{trained:,} learner timesteps" in doc[
        "learning.md"]
    # a row on the wire: codec 1's measured bytes and the packed row inside them, as the docs have them
    assert "instead of codec 1's 15,391, a 15,375 B packed row" in readme
    assert "| 15,391 | 15,391 |" in doc["throughput.md"] and "15,375 B a row" in doc["throughput.md"]
    # search's cost: one figure, measured
    assert "6-11x" in readme and "6-11x" in doc["search.md"] and "6-11x" in doc["learning.md"]
    assert "twenty unsearched" not in doc["search.md"]
    # an iteration's time: the quiet figure, not the loaded range passed off as typical
    assert "takes 36.5 s" in readme and "quiet: 36.5 s" in doc["throughput.md"]
    assert "one to two minutes" not in readme
    # the first snapshot: the strength measurement's period, in README and in the refusal of a young run
    every = cfg.evaluation.strength.every_iterations
    assert f"every {every} iterations (the first at iteration {every})" in readme
    young = load_config({"profile": "cpu", "runs_dir": str(tmp_path), "run_name": "young"})
    (tmp_path / "young").mkdir()
    with pytest.raises(ValueError, match=f"the learner writes its first at iteration {every}, "):
        resolve("champion", young)
    # replay refuses what it cannot reproduce; README does not promise every episode
    assert "re-simulates any training episode exactly" not in readme and "or refuses naming why" in readme
    # tensorboard comes with make install (the dev extra), so no doc asks for a pip install of it
    import tomllib

    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert any(d.startswith("tensorboard==") for d in dev)
    assert "pip install tensorboard" not in readme and "pip install tensorboard" not in doc["strength.md"]
    assert "pip install --quiet --require-hashes -r $(LOCK)" in (ROOT / "Makefile").read_text()
    assert re.search(r"^tensorboard==", (ROOT / "requirements.lock").read_text(), re.M)  # what make install installs
    # every learner in the top-level help
    top = build_parser().format_help()
    assert all(word in top for word in ("PPO", "DQN", "AlphaZero"))
    # Kubernetes: what has run and what has not, said plainly in both
    for text in (readme, doc["kubernetes.md"]):
        assert "podman kube play" in text and re.search(r"not (yet )?(run )?on a\s+real\s+cluster", text), text[:80]
    assert "images must be built and pushed" in doc["kubernetes.md"] and "Secrets" in doc["kubernetes.md"]
