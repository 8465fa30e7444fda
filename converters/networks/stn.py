"""Spatial transformer that straightens a 94x24 plate crop before LPRNet."""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812

INPUT_CHW = (3, 24, 94)


class SpatialTransformer(nn.Module):
    """Input and output ``[N, 3, 24, 94]``: predicts an affine warp and applies it."""

    def __init__(self, in_channels: int = 3) -> None:
        super().__init__()
        self.localization = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=3),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.ReLU(inplace=True),
            nn.Conv2d(32, 32, kernel_size=5),
            nn.MaxPool2d(kernel_size=3, stride=3),
            nn.ReLU(inplace=True),
        )
        self.fc_loc = nn.Sequential(
            nn.Linear(32 * 14 * 2, 32),
            nn.ReLU(inplace=True),
            nn.Linear(32, 6),
        )

    def forward(self, x: Tensor) -> Tensor:
        theta = self.fc_loc(self.localization(x).flatten(1)).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.size()), align_corners=True)
        return F.grid_sample(x, grid, align_corners=True)
