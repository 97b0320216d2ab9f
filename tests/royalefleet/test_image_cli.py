"""The images install the runtime dependencies only (docker/requirements-*.txt): every command's
parser must build without the development extras, or every `royalefleet` command in a container
fails at start (the Compose test's `fleet status` did, on `import yaml` from the k8s generator)."""

import subprocess
import sys

# The `dev` extra's import names that no image installs (pyproject.toml [project.optional-dependencies]).
DEV_ONLY = ("yaml", "kubernetes_validate", "mypy", "hypothesis", "pytest", "check_jsonschema", "matplotlib",
            "tensorboard")


def run_without_dev_extras(code: str) -> subprocess.CompletedProcess:
    block = f"import sys\nfor m in {DEV_ONLY!r}: sys.modules[m] = None\n"
    return subprocess.run([sys.executable, "-c", block + code], capture_output=True, text=True, timeout=120)


def test_every_subcommand_parser_builds_without_the_dev_extras():
    done = run_without_dev_extras(
        "from royalefleet.cli import build_parser\n"
        "p = build_parser()\n"
        "sub = next(a for a in p._actions if a.__class__.__name__ == '_SubParsersAction')\n"
        "print(' '.join(sorted(sub.choices)))\n")
    assert done.returncode == 0, done.stderr
    commands = done.stdout.split()
    assert {"up", "status", "eval", "k8s", "keys", "checkpoints"} <= set(commands), commands


def test_k8s_without_pyyaml_says_what_to_install():
    done = run_without_dev_extras("from royalefleet.cli import main\nsys.exit(main(['k8s', '--check']))\n")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "royalefleet k8s: needs 'yaml', a development dependency: pip install -e '.[dev]'" in done.stdout
