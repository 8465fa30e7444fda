"""Converters: turn the real LPRNet, STN and plate-detector weights into serving formats."""
