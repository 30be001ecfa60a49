"""``resumable-data``: the command line. Subcommands register themselves in :data:`COMMANDS`.

``resumable-data inspect``: see :mod:`resumable_data.cli_inspect`; ``check-resume``: :mod:`.cli_check`;
``pin``: :mod:`.cli_pin`; ``demo``: :mod:`.demo`.

To add a subcommand (``demo``, ``check-resume``...): ``register(name, help, configure, run, example)``
where ``configure(parser)`` adds arguments, ``run(args) -> int`` does the work and ``example`` is
the ``examples:`` text its ``--help`` ends with.

Every subcommand shares :func:`main`'s endings: a :class:`~resumable_data.errors.ResumableDataError`
or a path the operating system refuses (a name too long, no permission: the message names the
argument) is one line on stderr and exit status 2, a closed stdout pipe exit 141, Ctrl-C a one-line
"interrupted" and exit 130; never a traceback.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from resumable_data.errors import ResumableDataError

__all__ = ["COMMANDS", "Command", "build_parser", "main", "register"]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    example: str = ""


COMMANDS: dict[str, Command] = {}


def register(
    name: str,
    help: str,
    configure: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    example: str = "",
) -> None:
    """Add a subcommand (last registration of a name wins); ``example`` ends its ``--help``."""
    COMMANDS[name] = Command(name, help, configure, run, example)


from resumable_data.cli_check import COMMAND as _CHECK_RESUME  # noqa: E402
from resumable_data.cli_check import EXAMPLES as _CHECK_RESUME_EXAMPLES  # noqa: E402
from resumable_data.cli_inspect import COMMAND as _INSPECT  # noqa: E402
from resumable_data.cli_inspect import EXAMPLES as _INSPECT_EXAMPLES  # noqa: E402
from resumable_data.cli_pin import COMMAND as _PIN  # noqa: E402
from resumable_data.cli_pin import EXAMPLES as _PIN_EXAMPLES  # noqa: E402

register(*_INSPECT, _INSPECT_EXAMPLES)
from resumable_data.cli_prepare import COMMAND as _PREPARE  # noqa: E402
from resumable_data.cli_prepare import EXAMPLES as _PREPARE_EXAMPLES  # noqa: E402

register(*_PIN, _PIN_EXAMPLES)
register(*_PREPARE, _PREPARE_EXAMPLES)
register(*_CHECK_RESUME, _CHECK_RESUME_EXAMPLES)


# -- demo ----------------------------------------------------------------------------------------
def _configure_demo(p: argparse.ArgumentParser) -> None:
    from resumable_data.demo import configure

    configure(p)


def _run_demo(args: argparse.Namespace) -> int:
    from resumable_data.demo import main_args

    return main_args(args)


DEMO_EXAMPLES = """examples:
  resumable-data demo                          # the stdlib corpus, a random kill step
  resumable-data demo --seed 7 --quiet         # a reproducible kill step, no progress bars
  resumable-data demo --data my_pinned_dir --tokens input_ids --eos-id 2   # your own pinned data"""

register(
    "demo",
    "train a tiny LM, SIGKILL it, resume it, and prove bit-identity with an uninterrupted run",
    _configure_demo,
    _run_demo,
    DEMO_EXAMPLES,
)


def build_parser() -> argparse.ArgumentParser:
    first = "\n".join(
        next(
            ln.split("  #")[0].rstrip()
            for ln in c.example.splitlines()
            if ln.strip().startswith(f"resumable-data {c.name}")
        )
        for c in COMMANDS.values()
        if c.example
    )
    parser = argparse.ArgumentParser(
        prog="resumable-data",
        description="Deterministic, resumable data pipelines.",
        epilog=f"examples:\n{first}\n\n'resumable-data COMMAND --help' shows more.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from resumable_data._version import __version__

    parser.add_argument("--version", action="version", version=f"resumable-data {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in COMMANDS.values():
        p = sub.add_parser(
            cmd.name,
            help=cmd.help,
            description=cmd.help,
            epilog=cmd.example or None,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        cmd.configure(p)
        flags = {a.dest: a.option_strings[-1] if a.option_strings else a.dest for a in p._actions}
        p.set_defaults(_run=cmd.run, _flags=flags)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args))
    except ResumableDataError as e:
        print(f"resumable-data {args.command}: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `resumable-data inspect ... | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's final flush
        return 141  # 128 + SIGPIPE, what a shell reports for a command whose pipe closed
    except KeyboardInterrupt:  # Ctrl-C: rd writes files atomically, so nothing half-written is left
        print(f"resumable-data {args.command}: interrupted (Ctrl-C)", file=sys.stderr)
        return 130  # 128 + SIGINT
    except OSError as e:  # the OS refused a path: a name too long, no permission, an I/O error
        print(f"resumable-data {args.command}: {_os_error(args, e)}", file=sys.stderr)
        return 2


#: what to do about an OSError on a path the user passed, by errno
_OS_FIXES = {
    errno.ENAMETOOLONG: "shorten it (each name at most 255 bytes): cd into a parent folder and pass a relative path",
    errno.EACCES: "give the current user access (ls -ld, chmod), or pass a copy it can read",
    errno.EPERM: "give the current user access (ls -ld, chmod), or pass a copy it can read",
    errno.ENOSPC: "free disk space, then run it again",
    errno.EROFS: "pass a folder on a writable file system",
}


def _os_error(args: argparse.Namespace, e: OSError) -> str:
    """``e`` as one sentence naming the argument whose path (or a file under it) the OS refused."""
    from pathlib import Path

    from resumable_data.errors import describe

    if e.filename is None:  # e.g. EIO from a read: the OS names no path
        return f"the operating system refused a read or write ({e.strerror or e}); fix: check the paths passed (ls -l)"
    failed = os.fsdecode(e.filename)
    name, value = "path", failed
    for dest, v in vars(args).items():
        given = os.fsdecode(v) if isinstance(v, (str, Path)) else None
        if (
            given
            and failed
            and any(  # as given, or made absolute (demo resolves its paths)
                failed == g or failed.startswith(g.rstrip("/") + "/") for g in (given, os.path.abspath(given))
            )
        ):
            name, value = args._flags.get(dest, dest), given
            break
    fix = _OS_FIXES.get(e.errno if e.errno is not None else -1, "check the path (ls -l), or pass another one")
    what = f"{e.strerror or e}" + ("" if failed in (value, os.path.abspath(value)) else f" at {failed!r}")
    return describe(name, value, f"a path the operating system accepts ({what})", fix)


if __name__ == "__main__":
    sys.exit(main())
