"""requirements.lock and the images' docker/requirements-*.txt (all written by `make lock`) agree
with pyproject.toml, and every package in them carries its sha256: `make install` and the image
builds install them with --require-hashes, so a package without a hash would fail the install and
a version that drifted from pyproject's pin would install something the tests never ran."""

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
DOCKER = ROOT / "docker"
IMAGE_FILES = ("requirements-build.txt", "requirements-rollout.txt", "requirements-learner.txt")
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})$")


def canonical(name: str) -> str:
    """PEP 503 name: 'PyYAML' -> 'pyyaml', 'prometheus_client' -> 'prometheus-client'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> dict[str, tuple[str, list[str]]]:
    """{canonical name: (version, [sha256 hex, ...])} of a hash-pinned requirements file.

    Raises AssertionError naming the entry that is not `name==version` followed only by
    `--hash=sha256:` options (a URL, an editable, a range, an -r or an option line)."""
    entries: dict[str, tuple[str, list[str]]] = {}
    logical = re.sub(r"\\\n", " ", path.read_text())
    for line in logical.splitlines():
        line = line.split("#", 1)[0].strip() if line.lstrip().startswith("#") else line.strip()
        if not line:
            continue
        head, *options = line.split()
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;]+)", head)
        assert m, f"{path.name}: {head!r} is not name==version (make lock writes only those)"
        hashes = []
        for option in options:
            h = HASH.fullmatch(option)
            assert h, f"{path.name}: {head}: {option!r} is not a --hash=sha256: option"
            hashes.append(h.group(1))
        name = canonical(m.group(1))
        assert name not in entries, f"{path.name}: {name} is listed twice"
        entries[name] = (m.group(3), hashes)
    return entries


def pyproject_pins(*extras: str) -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = list(project["dependencies"])
    for extra in extras:
        deps += project["optional-dependencies"][extra]
    pins = {}
    for dep in deps:
        req = Requirement(dep)
        (spec,) = req.specifier
        assert spec.operator == "==", f"pyproject.toml: {dep!r} is not pinned with =="
        pins[canonical(req.name)] = spec.version
    return pins


def inputs(name: str) -> set[str]:
    """The package names a docker/*.in file asks for, following its -r lines."""
    names = set()
    for line in (DOCKER / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            names |= inputs(line[3:].strip())
        elif line:
            names.add(canonical(Requirement(line).name))
    return names


def test_the_lock_pins_every_pyproject_dependency_at_its_version():
    lock = read_lock(LOCK)
    wanted = pyproject_pins("dev", "curves")
    assert len(wanted) == 20  # 9 dependencies, 11 in dev (curves is a subset of dev)
    wrong = {n: (v, lock.get(n, ("missing",))[0]) for n, v in wanted.items() if lock.get(n, ("",))[0] != v}
    assert not wrong, f"pyproject pin vs requirements.lock: {wrong}; run make lock"


@pytest.mark.parametrize("path", [LOCK] + [DOCKER / f for f in IMAGE_FILES], ids=lambda p: p.name)
def test_every_locked_package_carries_a_sha256(path):
    entries = read_lock(path)
    assert entries
    assert not [n for n, (_, hashes) in entries.items() if not hashes]


def test_the_lock_holds_torch_with_its_cuda_wheels_and_pip():
    lock = read_lock(LOCK)
    assert lock["torch"][0] == pyproject_pins()["torch"]
    assert {"triton", "nvidia-cudnn-cu13", "nvidia-nccl-cu13", "cuda-toolkit", "setuptools", "pip"} <= set(lock)


def test_the_lock_is_closed_under_the_requirements_of_what_it_installs():
    """Every requirement (markers for this platform, no extras) of every locked package installed
    here is itself locked: --require-hashes refuses an install that needs an unlocked package."""
    lock = read_lock(LOCK)
    missing, checked = {}, 0
    for name in lock:
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        checked += 1
        for text in requires:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                if canonical(req.name) not in lock:
                    missing.setdefault(name, []).append(req.name)
    assert checked >= 60, f"only {checked} locked packages are installed here"
    assert not missing, f"locked packages need these unlocked ones: {missing}; run make lock"


@pytest.mark.parametrize("image", IMAGE_FILES)
def test_the_image_files_are_subsets_of_the_lock_at_its_versions(image):
    lock, entries = read_lock(LOCK), read_lock(DOCKER / image)
    drift = {n: (v, lock.get(n, ("missing",))[0]) for n, (v, _) in entries.items() if lock.get(n, ("",))[0] != v}
    assert not drift, f"{image} vs requirements.lock: {drift}; run make lock"
    asked = inputs(image.replace(".txt", ".in"))
    assert asked and asked <= set(entries), f"{image} lacks {asked - set(entries)}; run make lock"


def test_the_images_take_pyprojects_pins_and_the_rollout_stays_torch_free():
    declared = pyproject_pins()
    rollout = read_lock(DOCKER / "requirements-rollout.txt")
    learner = read_lock(DOCKER / "requirements-learner.txt")
    for name, version in declared.items():
        assert learner[name][0] == version, f"requirements-learner.txt: {name} should be =={version}"
        if name not in ("torch", "safetensors"):
            assert rollout[name][0] == version, f"requirements-rollout.txt: {name} should be =={version}"
    heavy = [n for n in rollout if n in ("torch", "triton", "safetensors") or n.startswith(("nvidia-", "cuda-"))]
    assert not heavy
    assert {(n, v) for n, (v, _) in rollout.items()} <= {(n, v) for n, (v, _) in learner.items()}
    assert read_lock(DOCKER / "requirements-build.txt")["setuptools"][0] == read_lock(LOCK)["setuptools"][0]


def test_make_install_and_the_dockerfile_install_with_require_hashes():
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"^\$\(VENV\)/\.installed: pyproject\.toml \$\(LOCK\)$", make, re.M)
    assert re.search(r"^LOCK := requirements\.lock$", make, re.M)
    recipe = make.split("$(VENV)/.installed:", 1)[1].split("\n\n", 1)[0]
    installs = re.findall(r"pip install [^\n]*", recipe)
    assert installs == ["pip install --quiet --require-hashes -r $(LOCK)",
                        "pip install --quiet --no-deps --no-build-isolation -e ."]
    dockerfile = (ROOT / "Dockerfile").read_text()
    logical = re.sub(r"\\\n\s*", " ", dockerfile)
    pip_installs = re.findall(r"pip install [^&\n]*", logical)
    assert len(pip_installs) == 5, pip_installs
    for command in pip_installs:
        assert "--require-hashes -r /tmp/requirements/requirements-" in command or \
            "--no-deps /tmp/wheels/" in command, f"Dockerfile: {command!r} installs without hashes"


def test_read_lock_refuses_an_entry_without_a_pin_or_with_another_option(tmp_path):
    bad = tmp_path / "r.txt"
    bad.write_text("numpy>=2 \\\n    --hash=sha256:" + "a" * 64 + "\n")
    with pytest.raises(AssertionError, match=r"'numpy>=2' is not name==version"):
        read_lock(bad)
    bad.write_text("numpy==2.5.5 \\\n    --index-url=https://example.invalid\n")
    with pytest.raises(AssertionError, match=r"'--index-url=https://example.invalid' is not a --hash"):
        read_lock(bad)
    good = tmp_path / "g.txt"
    good.write_text("# c\nPyYAML==6.0.3 \\\n    --hash=sha256:" + "b" * 64 + "\n    # via x\n")
    assert read_lock(good) == {"pyyaml": ("6.0.3", ["b" * 64])}
