"""What a running Triton has done, from its own statistics (for tests that check which model
served a frame)."""

from __future__ import annotations

import tritonclient.grpc as grpcclient


def inference_counts(url: str, *models: str) -> dict[str, int]:
    """Requests each of ``models`` has executed so far (``inference_count``, all versions)."""
    client = grpcclient.InferenceServerClient(url)
    try:
        counts = {}
        for model in models:
            stats = client.get_inference_statistics(model, as_json=True)["model_stats"]
            counts[model] = sum(int(s.get("inference_count", 0)) for s in stats)
        return counts
    finally:
        client.close()
