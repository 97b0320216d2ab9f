"""Torch state as checkpoint files: modules, optimizers and the torch RNG, without pickle.

Every tensor goes into safetensors (a JSON header and raw little-endian bytes; loading runs
no code), everything else into msgspec JSON. ``torch.load`` is never called, so a checkpoint
file that crossed the network can at worst fail to parse.

Files produced (the learner chooses their names in the checkpoint):

* ``module_to_bytes``: safetensors of ``module.state_dict()``, one tensor per key, on CPU.
* ``optimizer_to_bytes``: safetensors of the per-parameter state tensors, named
  ``state/{param_index}/{key}`` (Adam: ``exp_avg``, ``exp_avg_sq``, ``step``, and
  ``max_exp_avg_sq`` with amsgrad), plus a JSON document with ``param_groups`` (every
  hyperparameter and each group's parameter indices) and any non-tensor state values.
* ``torch_rng_state``: safetensors holding ``cpu``, the uint8 CPU generator state.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
from safetensors.torch import load as safetensors_load, save as safetensors_save
import torch

OPTIMIZER_FORMAT = 1


def _plain(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor with its OWN contiguous storage holding ``tensor``'s values.

    Why a copy: safetensors refuses tensors that share storage (a tied weight appears in a
    state_dict under two keys pointing at one tensor; a buffer may be a view of another),
    and it needs contiguous memory. Cloning each one writes the values under every key, so
    loading copies the same values into both ends of a tie and the tie itself (one
    Parameter shared by two modules) is untouched: it lives in the module, not the file.
    """
    return tensor.detach().to("cpu").clone(memory_format=torch.contiguous_format)


def _save(tensors: dict[str, torch.Tensor], kind: str) -> bytes:
    return safetensors_save({k: _plain(v) for k, v in tensors.items()}, metadata={"royalefleet": kind})


def _load(data: bytes, kind: str) -> dict[str, torch.Tensor]:
    """Tensors of a safetensors blob, on CPU. Raises ValueError if ``data`` is not one."""
    try:
        loaded = safetensors_load(bytes(data))  # safetensors: no code runs on load, unlike torch.load
    except Exception as exc:  # safetensors raises its own SafetensorError, not a ValueError
        raise ValueError(f"{kind}: not a valid safetensors file ({exc})") from None
    # Each tensor into its own torch allocation (64-byte aligned). A tensor read out of the
    # blob sits wherever the file put it, and CPU kernels (Adam's fused multiply-adds among
    # them) round differently with alignment: a resumed run would drift from the original in
    # the last bits (measured: tests/royalefleet/test_verify_resume.py).
    return {k: v.clone() for k, v in loaded.items()}


# ----------------------------------------------------------------------------- modules


def module_to_bytes(module: torch.nn.Module) -> bytes:
    """safetensors of ``module.state_dict()``: every parameter and buffer under its
    state_dict key, dtype and shape kept, copied to CPU. Tied or otherwise storage-sharing
    tensors are written once per key (see ``_plain``). Raises TypeError if the state_dict
    holds a non-tensor value (``get_extra_state``), which this format does not carry."""
    state = module.state_dict()
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"state_dict entry {key!r} is a {type(value).__name__}, not a tensor; "
                f"module_to_bytes stores tensors only (move extra state into a buffer)"
            )
    return _save(state, "module")


def bytes_to_module(module: torch.nn.Module, data: bytes, strict: bool = True):
    """Load ``module_to_bytes`` output into ``module`` in place (values copied onto each
    parameter's own device). Returns ``load_state_dict``'s (missing_keys, unexpected_keys).

    Raises ValueError if ``data`` is not safetensors or a tensor's dtype differs from the
    module's (``load_state_dict`` would cast silently, and a resume must be exact);
    RuntimeError (from torch) for missing/unexpected keys when ``strict`` or a shape mismatch.
    """
    tensors = _load(data, "module state")
    own = module.state_dict()
    for key, value in tensors.items():
        if key in own and isinstance(own[key], torch.Tensor) and own[key].dtype != value.dtype:
            raise ValueError(
                f"module state {key!r}: file holds {value.dtype}, the module has {own[key].dtype}; "
                f"build the module with the dtype the checkpoint was written with"
            )
    return module.load_state_dict(tensors, strict=strict)


# ----------------------------------------------------------------------------- optimizers


def _json_value(where: str, value: Any) -> Any:
    """Check that a hyperparameter survives JSON exactly (msgspec writes floats in their
    shortest round-tripping form, but NaN/inf would come back as null)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"optimizer {where} = {value}: JSON cannot hold a non-finite float")
    if isinstance(value, (list, tuple)):
        return [_json_value(where, v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"optimizer {where} is a {type(value).__name__}; only numbers, strings, bools, None and tensors are stored")


def optimizer_to_bytes(opt: torch.optim.Optimizer) -> tuple[bytes, bytes]:
    """(tensor_bytes, json_bytes) for ``opt.state_dict()``.

    tensor_bytes: safetensors with ``state/{param_index}/{key}`` for every tensor of the
    per-parameter state (Adam's ``step`` is a 0-d float32 tensor, ``exp_avg`` and
    ``exp_avg_sq`` have the parameter's shape and dtype) and ``group/{g}/{key}`` for a
    hyperparameter held as a tensor (e.g. a tensor ``lr``).
    json_bytes: ``{"format", "param_groups", "state_scalars"}``: each group's plain
    hyperparameters and ``params`` (parameter indices); non-tensor state values by index.
    Raises ValueError/TypeError for a value neither file can hold exactly."""
    sd = opt.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, state in sd["state"].items():
        for key, value in state.items():
            if "/" in str(key):
                raise ValueError(f"optimizer state key {key!r} contains '/'")
            if isinstance(value, torch.Tensor):
                tensors[f"state/{index}/{key}"] = value
            else:
                scalars.setdefault(str(index), {})[key] = _json_value(f"state[{index}][{key!r}]", value)
    groups = []
    for g, group in enumerate(sd["param_groups"]):
        plain = {}
        for key, value in group.items():
            if isinstance(value, torch.Tensor):
                tensors[f"group/{g}/{key}"] = value
            else:
                plain[key] = _json_value(f"param_groups[{g}][{key!r}]", value)
        groups.append(plain)
    doc = {"format": OPTIMIZER_FORMAT, "param_groups": groups, "state_scalars": scalars}
    return _save(tensors, "optimizer"), msgspec.json.encode(doc)


def bytes_to_optimizer(opt: torch.optim.Optimizer, tensor_bytes: bytes, json_bytes: bytes) -> None:
    """Load ``optimizer_to_bytes`` output into ``opt`` (built over the same parameters, in
    the same order and grouping). State tensors are moved to each parameter's device by
    torch (``step`` stays on CPU as torch expects). A JSON list is turned back into a tuple
    wherever ``opt``'s own group holds a tuple (Adam's ``betas``).

    Raises ValueError if either blob is malformed, of another format, or names a parameter
    index or group that ``opt`` does not have (torch also raises ValueError when the group
    sizes differ)."""
    tensors = _load(tensor_bytes, "optimizer state")
    try:
        doc = msgspec.json.decode(bytes(json_bytes))
        groups_in = doc["param_groups"]
        scalars = doc.get("state_scalars", {})
        fmt = doc.get("format")
    except (msgspec.DecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"optimizer JSON is malformed ({exc!r})") from None
    if fmt != OPTIMIZER_FORMAT:
        raise ValueError(f"optimizer JSON format {fmt!r}; this build reads {OPTIMIZER_FORMAT}")
    own_groups = opt.param_groups
    if len(groups_in) != len(own_groups):
        raise ValueError(
            f"optimizer file has {len(groups_in)} param groups, the optimizer has {len(own_groups)}; "
            f"build it with the same parameter groups as the run that wrote it"
        )
    n_params = sum(len(g["params"]) for g in own_groups)
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        parts = name.split("/")
        if len(parts) != 3 or parts[0] not in ("state", "group") or not parts[1].isdigit():
            raise ValueError(f"optimizer state file holds an unexpected tensor {name!r}")
        index = int(parts[1])
        if parts[0] == "state":
            if index >= n_params:
                raise ValueError(f"optimizer state {name!r}: the optimizer has only {n_params} parameters")
            state.setdefault(index, {})[parts[2]] = value
        else:
            if index >= len(groups_in):
                raise ValueError(f"optimizer state {name!r}: there are only {len(groups_in)} param groups")
            groups_in[index][parts[2]] = value
    for index, values in scalars.items():
        if not index.isdigit() or int(index) >= n_params:
            raise ValueError(f"optimizer JSON state for parameter {index!r}: the optimizer has {n_params} parameters")
        state.setdefault(int(index), {}).update(values)
    for mine, theirs in zip(own_groups, groups_in):
        for key, value in theirs.items():
            if isinstance(mine.get(key), tuple) and isinstance(value, list):
                theirs[key] = tuple(value)
    opt.load_state_dict({"state": state, "param_groups": groups_in})


# ----------------------------------------------------------------------------- RNG


def torch_rng_state() -> bytes:
    """safetensors holding ``cpu``: torch's CPU generator state (a 1-D uint8 tensor).
    CUDA generators are not included."""
    return _save({"cpu": torch.get_rng_state()}, "rng")


def set_torch_rng_state(data: bytes) -> None:
    """Restore the CPU generator from ``torch_rng_state`` output. Raises ValueError if
    ``data`` is not such a file (torch itself rejects a state of the wrong size)."""
    tensors = _load(data, "torch RNG state")
    state = tensors.get("cpu")
    if state is None or state.dtype != torch.uint8 or state.dim() != 1:
        raise ValueError(
            f"torch RNG state file should hold 'cpu' as a 1-D uint8 tensor, holds "
            f"{ {k: (str(v.dtype), list(v.shape)) for k, v in tensors.items()} }"
        )
    try:
        torch.set_rng_state(state)
    except RuntimeError as exc:
        raise ValueError(f"torch RNG state rejected by torch: {exc}") from None
