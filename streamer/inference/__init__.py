"""Inference: the gRPC stream client to Triton and the fair scheduler in front of it."""
