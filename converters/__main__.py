"""Command line: ``python -m converters {fetch,build,check}``."""

from converters.cli import main

raise SystemExit(main())
