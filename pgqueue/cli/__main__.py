"""``python -m pgqueue.cli``: the ``pgqueue`` command."""

from __future__ import annotations

import sys

from . import main

sys.exit(main())
