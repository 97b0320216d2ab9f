"""Name-addressed random streams: pure functions of (master seed, path), pinned to exact values
from an independent reimplementation of the rule, distinct per path, and a namespace that
refuses typos."""

import hashlib
import itertools
import json
import pathlib
import struct
import subprocess
import sys

import numpy as np
import pytest

from shared.seeding import (
    STREAMS, derive_generator, derive_int, derive_seedseq, stream, stream_path,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------- an independent rule


def spawn_key(path: str) -> tuple[int, ...]:
    """blake2b-128 of the UTF-8 path, read as four little-endian uint32 words."""
    return struct.unpack("<4I", hashlib.blake2b(path.encode("utf-8"), digest_size=16).digest())


def reference_generator(seed: int, path: str) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=spawn_key(path))))


def reference_int(seed: int, path: str) -> int:
    hi, lo = np.random.SeedSequence(seed, spawn_key=spawn_key(path)).generate_state(2, dtype=np.uint32)
    return ((int(hi) << 32) | int(lo)) >> 1


# (seed, path, spawn key, derive_int, first three generator.integers(0, 2**32)), computed once with
# the functions above and written down: a change to the rule, to numpy's SeedSequence or to PCG64
# moves every stream of every run, and must fail here.
PINNED = [
    (20260921, "env/battle/0/ordinal/0", (1158264430, 2762468562, 409933144, 1001350786),
     2786606152172464140, [3553076254, 2361172451, 3000144906]),
    (0, "preflight/sample", (1260800857, 2000808295, 1932702098, 3113323378),
     507685768352332914, [3677715227, 3306006084, 1900094062]),
    (1, "act/iteration/4/cycle/17", (118051788, 3009962735, 3133463747, 3427628009),
     2916282391423552750, [4085227829, 3405189986, 4269915816]),
    (2**64 - 1, "torch/init", (1575407512, 1277648652, 1826637515, 2781144493),
     3951713933710781683, [63886448, 669388007, 1641292476]),
]


@pytest.mark.parametrize("seed, path, key, as_int, draws", PINNED, ids=[p[1] for p in PINNED])
def test_pinned_values(seed, path, key, as_int, draws):
    assert spawn_key(path) == key
    assert tuple(derive_seedseq(seed, path).spawn_key) == key
    assert derive_seedseq(seed, path).entropy == seed
    assert derive_int(seed, path) == as_int == reference_int(seed, path)
    assert derive_generator(seed, path).integers(0, 2**32, 3).tolist() == draws
    assert reference_generator(seed, path).integers(0, 2**32, 3).tolist() == draws
    assert isinstance(derive_generator(seed, path).bit_generator, np.random.PCG64)


def all_paths(n=6):
    """Every template filled with small field values: every template, a few hundred paths."""
    out = []
    for template in STREAMS:
        fields = sorted({f for f in template.replace("}", "{").split("{")[1::2]})
        for values in itertools.product(range(n), repeat=len(fields)):
            out.append(stream_path(template, **dict(zip(fields, values))))
    return out


def test_every_path_agrees_with_the_reference_and_fits_63_bits():
    for i, path in enumerate(all_paths()):
        seed = 1000 + i
        value = derive_int(seed, path)
        assert value == reference_int(seed, path)
        assert 0 <= value < 2**63
    # and the generator, on a sample of them
    for path in all_paths()[::37]:
        assert np.array_equal(derive_generator(5, path).random(4), reference_generator(5, path).random(4))


def test_different_paths_and_seeds_differ():
    paths = all_paths()
    assert len(set(paths)) == len(paths)
    ints = [derive_int(7, p) for p in paths]
    assert len(set(ints)) == len(ints)
    draws = {tuple(derive_generator(7, p).integers(0, 2**63, 2).tolist()) for p in paths}
    assert len(draws) == len(paths)
    # The same path under other master seeds.
    assert len({derive_int(s, "preflight/sample") for s in range(200)}) == 200
    # Near-identical paths are unrelated streams.
    assert derive_int(7, "env/battle/1/ordinal/12") != derive_int(7, "env/battle/11/ordinal/2")


def test_a_stream_is_a_pure_function_independent_of_call_order():
    a = [derive_generator(3, "torch/init").random() for _ in range(3)]
    assert a[0] == a[1] == a[2]
    before = derive_generator(3, "preflight/sample").integers(0, 1000, 5).tolist()
    for p in all_paths()[:50]:  # other consumers drawing in between move nothing
        derive_generator(3, p).random(10)
    assert derive_generator(3, "preflight/sample").integers(0, 1000, 5).tolist() == before
    g = stream(3, "scripted/battle/{battle}/ordinal/{ordinal}", battle=2, ordinal=9)
    assert g.random(3).tolist() == derive_generator(3, "scripted/battle/2/ordinal/9").random(3).tolist()


def test_same_values_in_a_fresh_process():
    cases = [(20260921, "env/battle/3/ordinal/5"), (0, "torch/init"), (99, "ppo/minibatch/iteration/2/epoch/1")]
    code = (
        "import json, sys\n"
        "from shared.seeding import derive_int, derive_generator\n"
        "cases = json.loads(sys.argv[1])\n"
        "print(json.dumps([[derive_int(s, p), derive_generator(s, p).integers(0, 2**62, 4).tolist(),"
        " derive_generator(s, p).permutation(10).tolist()] for s, p in cases]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, json.dumps(cases)], capture_output=True, text=True,
                         cwd=ROOT, timeout=60, env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    here = [[derive_int(s, p), derive_generator(s, p).integers(0, 2**62, 4).tolist(),
             derive_generator(s, p).permutation(10).tolist()] for s, p in cases]
    assert json.loads(out.stdout) == here


# ----------------------------------------------------------------------------- the namespace


def test_stream_path_fills_a_template():
    assert stream_path("act/iteration/{iteration}/cycle/{cycle}", iteration=4, cycle=17) == "act/iteration/4/cycle/17"
    assert stream_path("torch/init") == "torch/init"
    assert stream_path("match/roles/battles/{battles}", battles=64) == "match/roles/battles/64"


def test_unknown_template_is_a_key_error_naming_it():
    with pytest.raises(KeyError) as info:
        stream_path("act/iter/{i}", i=1)
    text = info.value.args[0]
    assert text.startswith("unknown random stream template 'act/iter/{i}'; known: env/battle/{battle}/ordinal/{ordinal}, ")
    assert all(t in text for t in STREAMS)
    with pytest.raises(KeyError, match="unknown random stream template 'env/battle/3/ordinal/4'"):
        stream(1, "env/battle/3/ordinal/4")  # an already-filled path is not a template


def test_missing_or_extra_field_is_a_key_error_naming_the_template():
    with pytest.raises(KeyError) as info:
        stream_path("act/iteration/{iteration}/cycle/{cycle}", iteration=4)
    assert info.value.args[0] == (
        "stream 'act/iteration/{iteration}/cycle/{cycle}' takes fields ['cycle', 'iteration'], got ['iteration']"
    )
    with pytest.raises(KeyError) as info:
        stream_path("torch/init", x=1)
    assert info.value.args[0] == "stream 'torch/init' takes fields [], got ['x']"
    with pytest.raises(KeyError) as info:
        stream(0, "env/battle/{battle}/ordinal/{ordinal}", battle=1, ordinal=2, seat=0)
    assert info.value.args[0] == (
        "stream 'env/battle/{battle}/ordinal/{ordinal}' takes fields ['battle', 'ordinal'], got ['battle', 'ordinal', 'seat']"
    )


def test_every_stream_has_a_description():
    assert {"env/battle/{battle}/ordinal/{ordinal}", "match/battle/{battle}/ordinal/{ordinal}",
            "act/iteration/{iteration}/cycle/{cycle}", "ppo/minibatch/iteration/{iteration}/epoch/{epoch}",
            "torch/init"} <= set(STREAMS)
    assert all(isinstance(d, str) and d for d in STREAMS.values())
