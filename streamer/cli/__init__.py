"""Command line: `python -m streamer run | recognise | replay | deadletters`."""
