"""Extension sections (issue 16): an installed package provides a config section through the
``royalefleet.extensions`` entry point; a section nobody provides is refused by name; a used
section is in the identity with its provider's distribution and version."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from shared.config import ConfigError, dump_config, load_config
from shared.extensions import ExtensionRecord, providers
from shared.identity import compute_identity, run_id
from shared.messages import EngineBuild

EXAMPLE = Path(__file__).resolve().parents[1] / "extension_example"
ENGINE = EngineBuild(engine_class="royalegym.rust_engine.RustEngine", calibration_digest="c", build_digest="b",
                     binary_sha256="e42383517b50bfe1", cards_digest="k", royalegym_version="0.1.25")


@pytest.fixture
def installed(monkeypatch):
    """The example extension on sys.path: installed, as importlib.metadata sees it."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    yield
    sys.modules.pop("royalefleet_curiosity", None)


def ident(cfg):
    return compute_identity(cfg, engine=ENGINE, obs_digest="o", action_digest="a", codec_table_digest="t",
                            device_kind="cpu:x86_64", torch_version="2.14.1")


def test_an_installed_package_provides_a_section_validated_by_its_schema(installed):
    (p,) = providers()["curiosity"]
    assert (p.distribution, p.version) == ("royalefleet-curiosity", "0.3.1")
    cfg = load_config({"profile": "tiny", "curiosity": {"scale": 0.5}})
    assert cfg.extensions == {"curiosity": {"scale": 0.5, "horizon": 32}}
    # the stored config reloads as it was (the section is kept under "extensions")
    again = load_config(dump_config(cfg).decode())
    assert again == cfg
    with pytest.raises(ConfigError) as err:
        load_config({"profile": "tiny", "curiosity": {"scale": -1.0, "horizn": 3}})
    assert err.value.problems == [
        "curiosity.scale: Expected `float` >= 0.0 (got -1.0) (section provided by royalefleet-curiosity 0.3.1)",
        "curiosity.horizn: unknown field; did you mean 'horizon'? (section provided by royalefleet-curiosity 0.3.1)"]


def test_a_section_no_installed_package_provides_is_refused_by_name(installed):
    with pytest.raises(ConfigError) as err:
        load_config({"profile": "tiny", "curiosty": {"scale": 0.5}})
    assert err.value.problems == [
        "curiosty: unknown field, and no installed package provides a section 'curiosty' (entry point group "
        "royalefleet.extensions; installed sections: curiosity, imitation, warm_start); did you mean 'curiosity'?"]


def test_without_the_package_the_section_is_refused(monkeypatch):
    with pytest.raises(ConfigError, match="no installed package provides a section 'curiosity'"):
        load_config({"profile": "tiny", "curiosity": {"scale": 0.5}})
    # a null section counts as absent
    assert load_config({"profile": "tiny", "curiosity": None}).extensions == {}


def test_a_used_section_is_in_the_identity_with_its_provider(installed):
    plain = ident(load_config({"profile": "tiny"}))
    a = ident(load_config({"profile": "tiny", "curiosity": {}}))
    b = ident(load_config({"profile": "tiny", "curiosity": {"scale": 0.02}}))
    assert plain.extensions is None
    (rec,) = a.extensions
    assert isinstance(rec, ExtensionRecord)
    assert (rec.section, rec.distribution, rec.version) == ("curiosity", "royalefleet-curiosity", "0.3.1")
    assert len({run_id(plain), run_id(a), run_id(b)}) == 3
    assert a.extensions[0].digest != b.extensions[0].digest
