"""``python -m nvtopy``: the same as the ``nvtopy`` command."""

from .commands.dispatch import console

console()
