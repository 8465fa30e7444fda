"""Triton Python-backend model that serves a TorchScript file on the CPU.

Copied by ``python -m converters build --target cpu`` into ``<model>/1/model.py``
next to the exported ``model.pt``. The CPU Triton build has no PyTorch backend,
so this stands in for ``platform: "pytorch_libtorch"``: same tensor names
(``INPUT__0`` -> ``OUTPUT__0``), same batching semantics. Requests merged by the
dynamic batcher are concatenated, run as one batch and split again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        config = json.loads(args["model_config"])
        self.name = config["name"]
        parameters = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        threads = int(parameters.get("torch_threads", "1"))
        torch.set_num_threads(threads)
        path = Path(args["model_repository"]) / args["model_version"] / "model.pt"
        if not path.is_file():
            raise pb_utils.TritonModelException(
                f"{self.name}: {path} is missing; run `python -m converters build`"
            )
        self.module = torch.jit.load(str(path), map_location="cpu").eval()
        pb_utils.Logger.log_info(f"{self.name}: loaded {path.name} with {threads} torch threads")

    def execute(self, requests: list[Any]) -> list[Any]:
        arrays = [pb_utils.get_input_tensor_by_name(r, "INPUT__0").as_numpy() for r in requests]
        sizes = [len(a) for a in arrays]
        batch = torch.from_numpy(np.concatenate(arrays, axis=0))
        with torch.inference_mode():
            output = self.module(batch)
        if isinstance(output, (tuple, list)):
            output = output[0]
        result = output.contiguous().numpy()
        responses = []
        start = 0
        for size in sizes:
            tensor = pb_utils.Tensor("OUTPUT__0", result[start : start + size])
            responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
            start += size
        return responses
