"""``python -m taskiq_fanin.cli``: the same as ``taskiq-fanin``."""

from taskiq_fanin.cli import main

raise SystemExit(main())
