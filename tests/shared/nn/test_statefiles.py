"""Torch state <-> checkpoint bytes: exact round trips, tied weights, Adam, RNG, no pickle."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from torch import nn

from shared.nn.statefiles import (
    bytes_to_module,
    bytes_to_optimizer,
    module_to_bytes,
    optimizer_to_bytes,
    set_torch_rng_state,
    torch_rng_state,
)


class Net(nn.Module):
    """A small net with a buffer, an int64 buffer (BatchNorm's counter) and a tied head."""

    def __init__(self, seed: int, tied: bool = True):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(6, 4)
        self.body = nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)
        self.head = nn.Linear(4, 6, bias=False)
        if tied:
            self.head.weight = self.embed.weight  # one Parameter, two state_dict keys
        # a non-contiguous buffer sharing storage with another buffer
        self.register_buffer("base", torch.arange(12, dtype=torch.float64).reshape(3, 4) + seed)
        self.register_buffer("base_t", self.base.t())

    def forward(self, idx):
        return self.head(self.norm(torch.relu(self.body(self.embed(idx)))))


def safetensors_header(data: bytes) -> dict:
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n])


def assert_same_state(a: nn.Module, b: nn.Module):
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for key in sa:
        assert sa[key].dtype == sb[key].dtype, key
        assert torch.equal(sa[key], sb[key]), key


def test_module_round_trip_is_exact_and_keeps_dtypes():
    src = Net(seed=1)
    src.train()
    src(torch.tensor([0, 1, 2, 5]))  # move BatchNorm statistics and its int64 counter
    dst = Net(seed=2)
    assert not torch.equal(src.body.weight, dst.body.weight)
    result = bytes_to_module(dst, module_to_bytes(src))
    assert list(result.missing_keys) == [] and list(result.unexpected_keys) == []
    assert_same_state(src, dst)
    assert dst.norm.num_batches_tracked.dtype == torch.int64 and int(dst.norm.num_batches_tracked) == 1


def test_tied_weights_round_trip_and_stay_tied():
    src = Net(seed=1)
    data = module_to_bytes(src)
    header = safetensors_header(data)
    # both ends of the tie are in the file, each with the full values
    assert header["embed.weight"]["shape"] == header["head.weight"]["shape"] == [6, 4]
    assert header["base_t"]["shape"] == [4, 3]
    dst = Net(seed=2)
    bytes_to_module(dst, data)
    assert torch.equal(dst.head.weight, src.embed.weight) and torch.equal(dst.embed.weight, src.embed.weight)
    assert dst.head.weight is dst.embed.weight
    assert torch.equal(dst.base_t, src.base.t())
    # the file is safetensors, never a pickle
    assert not data.startswith(b"\x80") and header["__metadata__"] == {"royalefleet": "module"}


def test_strict_load_and_dtype_mismatch():
    data = module_to_bytes(Net(seed=1))
    other = Net(seed=2)
    other.extra = nn.Linear(2, 2)
    with pytest.raises(RuntimeError, match="Missing key"):
        bytes_to_module(other, data)
    result = bytes_to_module(other, data, strict=False)
    assert sorted(result.missing_keys) == ["extra.bias", "extra.weight"]
    doubled = Net(seed=2).double()
    with pytest.raises(ValueError, match="file holds torch.float32, the module has torch.float64"):
        bytes_to_module(doubled, data)
    with pytest.raises(ValueError, match="not a valid safetensors file"):
        bytes_to_module(Net(seed=2), b"\x80\x04garbage")


def _train_steps(model: nn.Module, opt: torch.optim.Optimizer, steps: range):
    for step in steps:
        g = torch.Generator().manual_seed(step)
        idx = torch.randint(0, 6, (16,), generator=g)
        target = torch.randn(16, 6, generator=g)
        opt.zero_grad()
        nn.functional.mse_loss(model(idx), target).backward()
        opt.step()


def _adam(model: nn.Module, kind: str) -> torch.optim.Optimizer:
    groups = [
        {"params": list(model.embed.parameters()) + list(model.body.parameters())},
        {"params": list(model.norm.parameters()), "lr": 3e-3},
    ]
    if kind == "adam":
        return torch.optim.Adam(groups, lr=1e-2, eps=1e-5)
    return torch.optim.AdamW(groups, lr=1e-2, betas=(0.8, 0.95), weight_decay=0.1, amsgrad=True)


@pytest.mark.parametrize("kind", ["adam", "adamw_amsgrad"])
def test_adam_state_round_trip_gives_a_bit_identical_next_step(kind):
    model = Net(seed=1)
    opt = _adam(model, kind)
    _train_steps(model, opt, range(3))
    tensor_bytes, json_bytes = optimizer_to_bytes(opt)
    model_bytes = module_to_bytes(model)

    names = set(safetensors_header(tensor_bytes)) - {"__metadata__"}
    expected_keys = {"step", "exp_avg", "exp_avg_sq"} | ({"max_exp_avg_sq"} if kind != "adam" else set())
    assert names == {f"state/{i}/{k}" for i in range(5) for k in expected_keys}
    doc = json.loads(json_bytes)
    assert [g["params"] for g in doc["param_groups"]] == [[0, 1, 2], [3, 4]]
    assert doc["param_groups"][1]["lr"] == 3e-3

    fresh_model = Net(seed=9)
    bytes_to_module(fresh_model, model_bytes)
    fresh_opt = _adam(fresh_model, kind)
    fresh_opt.param_groups[0]["lr"] = 0.5  # overwritten by the load
    bytes_to_optimizer(fresh_opt, tensor_bytes, json_bytes)
    assert fresh_opt.param_groups[0]["lr"] == 1e-2
    assert fresh_opt.param_groups[0]["betas"] == opt.param_groups[0]["betas"]
    assert isinstance(fresh_opt.param_groups[0]["betas"], tuple)
    assert float(fresh_opt.state[fresh_model.body.weight]["step"]) == 3.0

    _train_steps(model, opt, range(3, 5))
    _train_steps(fresh_model, fresh_opt, range(3, 5))
    assert_same_state(model, fresh_model)
    for key in expected_keys:
        assert torch.equal(opt.state[model.body.weight][key], fresh_opt.state[fresh_model.body.weight][key])


def test_optimizer_with_other_groups_is_refused():
    model = Net(seed=1)
    opt = _adam(model, "adam")
    _train_steps(model, opt, range(1))
    tensor_bytes, json_bytes = optimizer_to_bytes(opt)
    single = torch.optim.Adam(Net(seed=1).parameters(), lr=1e-2)
    with pytest.raises(ValueError, match="file has 2 param groups, the optimizer has 1"):
        bytes_to_optimizer(single, tensor_bytes, json_bytes)
    with pytest.raises(ValueError, match="optimizer JSON is malformed"):
        bytes_to_optimizer(_adam(Net(seed=1), "adam"), tensor_bytes, b"[1, 2]")


def test_torch_rng_state_round_trip():
    torch.manual_seed(123)
    torch.rand(7)
    data = torch_rng_state()
    header = safetensors_header(data)
    assert header["cpu"]["dtype"] == "U8" and len(header["cpu"]["shape"]) == 1
    expected = torch.rand(5)
    torch.manual_seed(999)
    set_torch_rng_state(data)
    assert torch.equal(torch.rand(5), expected)
    with pytest.raises(ValueError, match="should hold 'cpu' as a 1-D uint8 tensor"):
        set_torch_rng_state(module_to_bytes(nn.Linear(1, 1)))
