"""PyTorch definitions of the recognition networks, written to load the original checkpoints."""
