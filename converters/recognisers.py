"""Load the LPRNet and STN checkpoints into our networks and export them to TorchScript."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from converters.errors import ConversionError
from converters.networks.lprnet import LPRNet
from converters.networks.stn import SpatialTransformer

STATE_DICT_KEY = "net_state_dict"


@dataclass(frozen=True)
class RecogniserSpec:
    """One of the two recognition networks: how to build it and its tensor shapes."""

    name: str
    build: Callable[[], nn.Module]
    input_chw: tuple[int, int, int]
    output_shape: tuple[int, ...]


SPECS: dict[str, RecogniserSpec] = {
    "stn": RecogniserSpec("stn", SpatialTransformer, (3, 24, 94), (3, 24, 94)),
    "lprnet": RecogniserSpec("lprnet", LPRNet, (3, 24, 94), (23, 18)),
}


def load_checkpoint(spec: RecogniserSpec, path: Path) -> nn.Module:
    """Build the network and load ``path`` strictly, in eval mode.

    Raises ``ConversionError`` with every missing, unexpected or mis-shaped key
    when the checkpoint is not the one this network was written for.
    """
    if not path.is_file():
        raise ConversionError(f"{spec.name}: checkpoint {path} does not exist")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a corrupt file
        raise ConversionError(f"{spec.name}: cannot read checkpoint {path}: {exc}") from exc
    if not isinstance(checkpoint, dict) or STATE_DICT_KEY not in checkpoint:
        keys = list(checkpoint)[:5] if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise ConversionError(
            f"{spec.name}: {path} is not a training checkpoint with '{STATE_DICT_KEY}' "
            f"(found {keys})"
        )
    state = checkpoint[STATE_DICT_KEY]
    model = spec.build()
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    mis_shaped = [
        f"{k}: checkpoint {tuple(state[k].shape)} != network {tuple(v.shape)}"
        for k, v in expected.items()
        if k in state and tuple(state[k].shape) != tuple(v.shape)
    ]
    if missing or unexpected or mis_shaped:
        problems = []
        if missing:
            problems.append(f"missing keys {missing[:5]}{' ...' if len(missing) > 5 else ''}")
        if unexpected:
            problems.append(
                f"unexpected keys {unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}"
            )
        problems.extend(mis_shaped[:5])
        raise ConversionError(
            f"{spec.name}: {path} does not match the {spec.name} network: " + "; ".join(problems)
        )
    model.load_state_dict(state, strict=True)
    return model.eval()


def export_torchscript(spec: RecogniserSpec, model: nn.Module) -> torch.jit.ScriptModule:
    """Script the network (not trace: no shape is baked in, any batch size works).

    Not frozen: freezing folds batch norms into convolutions, which changes the
    numerics slightly and would break the eager == TorchScript check.
    """
    return torch.jit.script(model.eval())


def max_abs_difference(
    spec: RecogniserSpec, eager: nn.Module, scripted: torch.jit.ScriptModule, batch: int = 4
) -> float:
    """Run both on fresh random inputs and return the largest absolute output difference."""
    generator = torch.Generator().manual_seed(torch.seed() % (2**31))
    x = torch.randn((batch, *spec.input_chw), generator=generator)
    with torch.inference_mode():
        return float((eager(x) - scripted(x)).abs().max())
