"""``python -m goflux.cli``: the same as the ``goflux`` command."""

import sys

from goflux.cli._main import main

__all__ = ()

if __name__ == "__main__":
    sys.exit(main())
