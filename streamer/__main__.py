"""``python -m streamer``: see :mod:`streamer.cli`."""

from streamer.cli import main

raise SystemExit(main())
