"""Loaded by pytest before the suite's own conftest: let the test run cache bytecode.

Where ``PYTHONDONTWRITEBYTECODE`` is set (as on some CI images), every test process
compiles goflux, the tests and their rewritten asserts afresh: about half of the
fast tier's collection. ``__pycache__`` is ignored by git and left out of the
wheel and sdist.
"""

import sys

sys.dont_write_bytecode = False
