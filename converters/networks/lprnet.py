"""LPRNet (Zherzdev & Gruzdev, 2018) as trained for the original checkpoint.

Layer order and names follow the checkpoint (``backbone.N`` and ``container``)
so its ``net_state_dict`` loads strictly. One deliberate change from the
original code: the global-context normalisation divides each feature map by
its own sample's mean square, not the whole batch's, so a plate reads the same
whether Triton batches it with other crops or not. For a batch of one both are
identical, which is how the original pipeline ran.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812

NUM_CLASSES = 23
OUT_INDICES = (2, 6, 13, 22)
INPUT_CHW = (3, 24, 94)


class SmallBasicBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        mid = out_channels // 4
        self.block = nn.Sequential(
            nn.Conv2d(in_channels, mid, kernel_size=1, stride=1),
            nn.ReLU(),
            nn.Conv2d(mid, mid, kernel_size=(3, 1), padding=(1, 0)),
            nn.ReLU(),
            nn.Conv2d(mid, mid, kernel_size=(1, 3), padding=(0, 1)),
            nn.ReLU(),
            nn.Conv2d(mid, out_channels, kernel_size=1),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.block(x)


class LPRNet(nn.Module):
    """Input ``[N, 3, 24, 94]`` (STN output), output logits ``[N, classes, 18]``."""

    def __init__(
        self,
        class_num: int = NUM_CLASSES,
        out_indices: Sequence[int] = OUT_INDICES,
        dropout_prob: float = 0.1,
    ) -> None:
        super().__init__()
        self.class_num = class_num
        self.out_indices = list(out_indices)
        # MaxPool3d on a 4-D tensor pools over (channels, H, W) of each sample:
        # the original network uses it to halve/quarter the channel count.
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=3, stride=1),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool3d(kernel_size=(1, 3, 3), stride=(1, 1, 1)),
            SmallBasicBlock(64, 128),
            nn.BatchNorm2d(128),
            nn.ReLU(),
            nn.MaxPool3d(kernel_size=(1, 3, 3), stride=(2, 1, 2)),
            SmallBasicBlock(64, 256),
            nn.BatchNorm2d(256),
            nn.ReLU(),
            SmallBasicBlock(256, 256),
            nn.BatchNorm2d(256),
            nn.ReLU(),
            nn.MaxPool3d(kernel_size=(1, 3, 3), stride=(4, 1, 2)),
            nn.Dropout(dropout_prob),
            nn.Conv2d(64, 256, kernel_size=(1, 4), stride=1),
            nn.BatchNorm2d(256),
            nn.ReLU(),
            nn.Dropout(dropout_prob),
            nn.Conv2d(256, class_num, kernel_size=(13, 1), stride=1),
            nn.BatchNorm2d(class_num),
            nn.ReLU(),
        )
        feature_dim = 0
        for i in self.out_indices:
            norm = self.backbone[i - 1]
            assert isinstance(norm, nn.BatchNorm2d)
            feature_dim += norm.num_features
        self.container = nn.Conv2d(feature_dim, class_num, kernel_size=(1, 1), stride=(1, 1))

    def forward(self, x: Tensor) -> Tensor:
        features: list[Tensor] = []
        for i, layer in enumerate(self.backbone):
            x = layer(x)
            if i in self.out_indices:
                features.append(x)
        context: list[Tensor] = []
        for i, feature in enumerate(features):
            if i <= 1:
                feature = F.avg_pool2d(feature, kernel_size=5, stride=5)
            elif i == 2:
                feature = F.avg_pool2d(feature, kernel_size=(4, 10), stride=(4, 2))
            mean_square = feature.pow(2).mean(dim=(1, 2, 3), keepdim=True)
            context.append(feature / mean_square)
        x = self.container(torch.cat(context, 1))
        return x.mean(dim=2)
