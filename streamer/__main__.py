"""``python -m streamer``: see :mod:`streamer.cli.main`."""

from streamer.cli.main import main

raise SystemExit(main())
