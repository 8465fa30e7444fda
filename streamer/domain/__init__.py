"""What travels between stages: frames, plate readings, results (data, no I/O)."""
