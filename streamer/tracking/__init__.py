"""Tracking and decisions: tracker, evidence, votes, passes."""
