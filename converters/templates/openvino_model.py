"""Triton Python-backend model that serves an OpenVINO IR on the CPU.

Copied by ``python -m converters build --target cpu --runtime openvino`` into
``<model>/1/model.py`` next to the converted ``model.xml`` / ``model.bin``. Same tensor
names (``INPUT__0`` -> ``OUTPUT__0``) and batching semantics as the TorchScript model it
replaces: requests merged by the dynamic batcher are concatenated, run as one batch and
split again. One compiled model (one stream) per instance; its settings come from the
config's parameters:

* ``INFERENCE_NUM_THREADS``: CPU threads of this instance (default 1). Threads are not
  pinned to cores: every instance is its own process, and pinned instances would pile onto
  the same cores.
* ``INFERENCE_PRECISION_HINT``: ``f32`` (default) or ``bf16``; bf16 needs a CPU that
  OpenVINO reports as supporting it, else the model fails to load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import triton_python_backend_utils as pb_utils

INPUT = "INPUT__0"
OUTPUT = "OUTPUT__0"
HINTS = ("f32", "bf16")


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        config = json.loads(args["model_config"])
        self.name = name = config["name"]
        parameters = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        threads_text = parameters.get("INFERENCE_NUM_THREADS", "1")
        hint = parameters.get("INFERENCE_PRECISION_HINT", "f32")
        if not threads_text.isdigit() or int(threads_text) < 1:
            raise pb_utils.TritonModelException(
                f"{name}: parameter INFERENCE_NUM_THREADS must be an integer >= 1, "
                f"got {threads_text!r}"
            )
        if hint not in HINTS:
            raise pb_utils.TritonModelException(
                f"{name}: parameter INFERENCE_PRECISION_HINT must be one of {HINTS}, got {hint!r}"
            )
        inputs = [t["name"] for t in config.get("input", [])]
        outputs = [t["name"] for t in config.get("output", [])]
        if inputs != [INPUT] or outputs != [OUTPUT] or int(config.get("max_batch_size", 0)) < 1:
            raise pb_utils.TritonModelException(
                f"{name}: config.pbtxt must have input {INPUT}, output {OUTPUT} and "
                f"max_batch_size >= 1, got inputs {inputs}, outputs {outputs}"
            )
        core = ov.Core()
        if hint == "bf16":
            capabilities = core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
            if "BF16" not in capabilities:
                raise pb_utils.TritonModelException(
                    f"{name}: INFERENCE_PRECISION_HINT bf16, but this CPU does not support "
                    f"bf16 (OpenVINO reports {list(capabilities)}); rebuild with "
                    "`python -m converters build --runtime openvino --precision fp32`"
                )
        path = Path(args["model_repository"]) / args["model_version"] / "model.xml"
        if not path.is_file() or not path.with_suffix(".bin").is_file():
            raise pb_utils.TritonModelException(
                f"{name}: {path} or its .bin is missing; run `python -m converters build`"
            )
        model = core.read_model(str(path))
        expected = [int(d) for d in config["input"][0]["dims"]]
        shape = model.input(0).get_partial_shape()
        actual = [d.get_length() if d.is_static else -1 for d in shape]
        if INPUT not in model.input(0).get_names() or actual[1:] != expected:
            raise pb_utils.TritonModelException(
                f"{name}: {path.name} takes {sorted(model.input(0).get_names())} {actual}, "
                f"config.pbtxt {INPUT} [-1, {', '.join(map(str, expected))}]: rebuild"
            )
        self.compiled = core.compile_model(
            model,
            "CPU",
            {
                "INFERENCE_NUM_THREADS": int(threads_text),
                "INFERENCE_PRECISION_HINT": hint,
                "NUM_STREAMS": 1,
                "ENABLE_CPU_PINNING": False,
            },
        )
        self.request = self.compiled.create_infer_request()
        pb_utils.Logger.log_info(
            f"{name}: loaded {path.name} with OpenVINO {ov.__version__.split('-')[0]}, "
            f"{threads_text} thread(s), precision {hint}"
        )

    def execute(self, requests: list[Any]) -> list[Any]:
        arrays = [pb_utils.get_input_tensor_by_name(r, INPUT).as_numpy() for r in requests]
        sizes = [len(a) for a in arrays]
        # One request (the usual case on a CPU): its tensor as it is, no concatenated copy.
        batch = arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=0)
        batch = np.ascontiguousarray(batch, dtype=np.float32)
        # share_inputs: OpenVINO reads the array in place instead of copying it (11 MB for
        # a 736x1280 frame); result: a copy, since the next infer reuses the output buffer.
        result = self.request.infer({0: batch}, share_inputs=True)[0]
        responses = []
        start = 0
        for size in sizes:
            tensor = pb_utils.Tensor(OUTPUT, result[start : start + size])
            responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
            start += size
        return responses
