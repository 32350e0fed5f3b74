"""``python -m nvtopy``: the same as the ``nvtopy`` command."""

import sys

from .cli import main

sys.exit(main())
