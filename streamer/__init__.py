"""lpr-streamer: real-time licence-plate stream processor on NVIDIA Triton."""
