"""``python -m nvtopy``: the same as the ``nvtopy`` command."""

import sys

from .commands.dispatch import main

sys.exit(main())
