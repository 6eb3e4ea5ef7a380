"""``python -m goflux``: the same as the ``goflux`` command."""

import sys

from goflux.cli import main

sys.exit(main())
