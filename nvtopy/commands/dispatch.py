"""The entry point: ``nvtopy [COMMAND] ...`` to the command's module, under one error policy.

Each command is a module of this package with ``build_parser(command)`` and
``run(command, args)`` (:mod:`.monitor` when no command is named), imported
only when chosen, so ``nvtopy --once --json`` never imports Textual. Every
error the user can cause is one line on stderr and a non-zero exit (2 for bad
arguments, 1 for an unusable machine), never a traceback (:func:`guarded`).
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from ..errors import NvtopyError, UsageError

__all__ = ["console", "exit_at_once", "guarded", "local_one_shot", "main"]

# The monitor's options that read something other than this machine's driver, or nothing at all: with one of
# them (or an abbreviation argparse would take for one) the program's head start is not begun (local_one_shot).
_NOT_THE_DRIVER = (
    "--demo",
    "--demo-gpus",
    "--demo-model",
    "--demo-seed",
    "--demo-procs",
    "--demo-fault",
    "--demo-steady",
    "--ssh",
    "--ssh-config",
    "--ssh-option",
    "--hostfile",
    "--prometheus",
    "--remote",
    "--print-config",
    "--help",
    "--version",
)

_exit_at_once = False


def exit_at_once() -> None:
    """Have the ``nvtopy`` program end without tearing the interpreter down once its command has returned.

    Why: a fleet monitor holds hundreds of thousands of objects (every remote GPU's histories and
    charts); freeing them one by one at exit took about a second at 64 hosts x 8 GPUs after the
    screen was gone, and the shell's prompt waited for it. Only the program's own entry
    (:func:`console`) acts on it, after the command has stopped its source and restored the terminal:
    a caller of :func:`main` (the tests) gets its return value as always.
    """
    global _exit_at_once
    _exit_at_once = True


def console() -> NoReturn:
    """The ``nvtopy`` program and ``python -m nvtopy``: :func:`main`, then its exit code.

    A local ``--once`` gets its head start first (:mod:`nvtopy.backends.nvml.headstart`): the driver opened
    and the GPUs' first GPM samples taken before the CLI's modules are imported, so that the pair GPM needs
    has matured by the time the snapshot is read. Only here: a caller of :func:`main` gets none.
    """
    if local_one_shot(sys.argv[1:]):
        import gc

        # A one-shot lives a tenth of a second and makes one snapshot's objects, whose cycles are few and bounded:
        # CPython's collector ran 36 times in one (8 GPUs x 64 processes, 4 % of its instructions) walking the
        # imported modules for next to nothing, and the interpreter's teardown freed everything one by one
        # (8 %) after the output was flushed. Neither is done: the process ends as a fleet monitor's does.
        gc.disable()
        exit_at_once()
        from ..backends.nvml.headstart import begin

        begin()
    code = main()
    if _exit_at_once:
        import contextlib

        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
                stream.flush()
        os._exit(code)
    sys.exit(code)


def local_one_shot(argv: Sequence[str]) -> bool:
    """Whether ``argv`` looks like ``nvtopy --once`` on this machine's GPUs, judged before anything is parsed.

    Conservative: no command, ``--once`` itself, and no option (nor its abbreviation) that reads
    simulated GPUs, other hosts or nothing at all. A wrong "yes" costs only the driver opened for
    nothing on a thread; a wrong "no" only the head start.
    """
    if "--once" not in argv or not argv[0].startswith("-"):
        return False
    for token in argv:
        if token in {"--", "-h"}:
            return False
        name = token.split("=", 1)[0]
        if name.startswith("--") and any(option.startswith(name) for option in _NOT_THE_DRIVER):
            return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """``nvtopy [COMMAND] ...``: parse, then run the command under :func:`guarded`."""
    from importlib import import_module

    from .options import COMMANDS

    argv = _help_as_option(list(sys.argv[1:] if argv is None else argv))
    command = argv[0] if argv and argv[0] in COMMANDS else "monitor"
    module = import_module(f".{COMMANDS[command][0] if command in COMMANDS else 'monitor'}", __package__)
    parser = module.build_parser(command)
    args = parser.parse_args(argv[1:] if command in COMMANDS else argv)
    check = getattr(module, "check_args", None)
    if check is not None:
        check(parser, args)
    return guarded(lambda: module.run(command, args))


def _help_as_option(argv: list[str]) -> list[str]:
    """``nvtopy help [COMMAND]`` as ``nvtopy [COMMAND] --help``: the habit of git, docker and pip.

    A word after ``help`` that is no command stays a word: the monitor's parser names
    the closest command for it (``nvtopy help lgo``: did you mean 'log'?).
    """
    from .options import COMMANDS

    if argv[:1] != ["help"] or "help" in COMMANDS:
        return argv
    rest = argv[1:]
    if rest and rest[0] not in COMMANDS:
        return rest
    return [*rest[:1], "--help"]


def guarded(function: Callable[[], int]) -> int:
    """Run a command; every error the user can cause becomes one line and an exit code.

    An error message may quote outside text (a peer's reply, a file's line, a
    driver string): it is printed through ``safe_text``, once, here, so it can
    neither retitle the terminal nor break the one line. And whatever the
    locale, text that stdout or stderr cannot encode (an ASCII or Latin-1
    terminal, a stray undecodable byte) is written as a backslash escape
    instead of raising UnicodeEncodeError.
    """
    import contextlib

    from ..textsafe import safe_text
    from .options import discard_stdout

    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) in ("strict", "surrogateescape") and hasattr(stream, "reconfigure"):
            with contextlib.suppress(OSError, ValueError):  # a replaced stream that cannot: keep it as it is
                stream.reconfigure(errors="backslashreplace")
    try:
        return _run_and_flush(function)
    except BrokenPipeError:
        # The reader (head, less) went away: not an error, exit 0 without a word.
        # What is still buffered for stdout goes to /dev/null at exit, quietly.
        discard_stdout()
        return 0
    except UsageError as exc:
        print(f"nvtopy: error: {safe_text(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except NvtopyError as exc:
        print(f"nvtopy: error: {safe_text(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: still one line, the traceback on request
        if os.environ.get("NVTOPY_DEBUG"):
            raise
        print(
            f"nvtopy: internal error: {safe_text(f'{type(exc).__name__}: {exc}')} "
            "(please report it; NVTOPY_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1


def _run_and_flush(function: Callable[[], int]) -> int:
    """Run ``function``, then flush stdout here, not at exit.

    At exit Python would print "Exception ignored" for a reader that went away
    (BrokenPipeError: :func:`guarded` ends quietly) or a full disk. A full disk
    while the command writes stdout (``--once > F``) is one line, not a bug report.
    """
    from .options import discard_stdout

    try:
        code = function()
    except BrokenPipeError:
        raise
    except OSError as exc:
        if exc.errno not in _DISK_FULL:
            raise
        discard_stdout()
        raise NvtopyError(f"cannot write {exc.filename or 'standard output'}: {exc.strerror or exc}") from None
    if sys.stdout is None:  # started with stdout closed
        return code
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        discard_stdout()
        raise NvtopyError(f"cannot write standard output: {exc.strerror or exc}") from None
    return code


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


if __name__ == "__main__":
    sys.exit(main())
