"""What travels between stages: frames, plate readings and results, tracked plates and
passes, camera status and snapshots, plate formats, known plates (data, no I/O)."""
