"""LPRNet and STN: our definitions load the original checkpoints and export faithfully."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from converters import assets
from converters.errors import ConversionError
from converters.recognisers import SPECS, export_torchscript, load_checkpoint, max_abs_difference


def _checkpoint(name: str) -> Path:
    return assets.verify(assets.asset(name), assets.default_assets_dir())


@pytest.mark.parametrize("name", ["stn", "lprnet"])
def test_torchscript_equals_eager_on_fresh_random_inputs(name: str) -> None:
    spec = SPECS[name]
    eager = load_checkpoint(spec, _checkpoint(name))
    scripted = export_torchscript(spec, eager)
    for _ in range(3):
        assert max_abs_difference(spec, eager, scripted, batch=5) <= 1e-5
    with torch.inference_mode():
        out = scripted(torch.randn(2, *spec.input_chw))
    assert tuple(out.shape) == (2, *spec.output_shape)


def test_lprnet_reads_each_plate_the_same_alone_or_in_a_batch() -> None:
    """The original normalised by the whole batch's mean; ours is per sample, so
    Triton's dynamic batching cannot change a reading."""
    spec = SPECS["lprnet"]
    model = load_checkpoint(spec, _checkpoint("lprnet"))
    batch = torch.randn(6, *spec.input_chw) * 0.5
    with torch.inference_mode():
        together = model(batch)
        alone = torch.cat([model(batch[i : i + 1]) for i in range(6)])
    # Float32 kernels differ slightly with the batch size; a batch-wide norm would differ by ~1.
    torch.testing.assert_close(together, alone, rtol=1e-4, atol=1e-4)


def test_saved_torchscript_reloads_with_same_output(tmp_path: Path) -> None:
    spec = SPECS["stn"]
    scripted = export_torchscript(spec, load_checkpoint(spec, _checkpoint("stn")))
    torch.jit.save(scripted, str(tmp_path / "model.pt"))
    reloaded = torch.jit.load(str(tmp_path / "model.pt"))
    x = torch.randn(3, *spec.input_chw)
    with torch.inference_mode():
        assert torch.equal(scripted(x), reloaded(x))


def test_checkpoint_of_the_other_network_names_the_mismatch() -> None:
    with pytest.raises(ConversionError, match=r"lprnet: .* does not match .*missing keys"):
        load_checkpoint(SPECS["lprnet"], _checkpoint("stn"))


def test_mis_shaped_checkpoint_names_the_tensor(tmp_path: Path) -> None:
    checkpoint = torch.load(_checkpoint("stn"), map_location="cpu", weights_only=True)
    checkpoint["net_state_dict"]["fc_loc.2.weight"] = torch.zeros(7, 32)
    path = tmp_path / "stn.pth"
    torch.save(checkpoint, path)
    with pytest.raises(ConversionError, match=r"fc_loc\.2\.weight: checkpoint \(7, 32\)"):
        load_checkpoint(SPECS["stn"], path)


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"not a checkpoint at all", "cannot read checkpoint"), (None, "does not exist")],
)
def test_unreadable_checkpoint_is_a_clear_error(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "lprnet.pth"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConversionError, match=message):
        load_checkpoint(SPECS["lprnet"], path)


def test_state_dict_without_training_wrapper_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "bare.pth"
    torch.save({"weights": torch.zeros(1)}, path)
    with pytest.raises(ConversionError, match="net_state_dict"):
        load_checkpoint(SPECS["stn"], path)
