"""Tracking and decisions: tracker, evidence, votes, passes, plate formats, known plates."""
