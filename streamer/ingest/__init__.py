"""Ingest: decoding (PyAV), sampling, the frame queue and the motion gate."""
