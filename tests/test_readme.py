"""The README as a new user meets it: its commands run as written, its links lead somewhere.

Why: a reader copies the README's examples. Each ``nvtopy ...`` line of its shell blocks is run
here, as the ``nvtopy`` command on PATH (the venv's, which is what the Quick start tells the
reader to activate), with only what a machine without a GPU needs added: ``--demo`` where the
command would read the driver, ``--count 1`` where it would run until Ctrl-C. A command that
needs a server, a terminal or a real GPU is skipped with its reason, so ``pytest -rs`` lists
what was not run. A new kind of command the test cannot place fails, and says how to place it.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from .builders import run_nvtopy

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SCREENSHOTS = ROOT / "screenshots"
# The console script of the Python running the tests (the venv's, as `make test` runs it), else the one on PATH.
NVTOPY = Path(sys.executable).parent / "nvtopy"
if not NVTOPY.exists() and shutil.which("nvtopy"):
    NVTOPY = Path(shutil.which("nvtopy") or "nvtopy")

SHELL_LANGUAGES = {"sh", "bash", "shell", "console"}
COMMAND_TIMEOUT_S = 90  # a loaded 2-core machine; a healthy command takes under 3 s
OPERATORS = {"|", "||", "&", "&&", ";", "<", ">", ">>"}

# Subcommands and flags that need something this test cannot give, with the reason pytest prints.
NEEDS_SERVER = {
    "exporter": "starts a server that runs until stopped",
    "watch": "runs until stopped or GPUs are free (tests/commands/test_watch.py runs it)",
    "web": "starts a web server that runs until stopped (tests/commands/test_web.py runs it)",
}
NEEDS_SERVER_FLAGS = {
    "--remote": "reads other hosts' exporters",
    "--prometheus": "reads a Prometheus server",
    "--ssh": "reaches other hosts over ssh (tests/end_to_end/test_ssh_real_sshd.py runs these through a real sshd)",
    "--hostfile": "reaches other hosts over ssh",
}
NEEDS_TERMINAL = {"replay": "the monitor, on a recording: needs a terminal"}
ONE_SHOT_FLAGS = {"--once", "--help", "-h", "--version", "--print-config"}
SUBCOMMANDS = {"log", "record", "replay", "exporter", "doctor", "report", "rules", "watch", "web"}
READS_THE_DRIVER = {None, "log", "record", "doctor"}  # the monitor's one-shot modes and these commands
RUNS_UNTIL_STOPPED = {"log", "record"}


@dataclass(frozen=True)
class Example:
    line: int  # in README.md, for the test's id and its messages
    text: str  # the command as written, comments dropped
    env: tuple[tuple[str, str], ...]  # VAR=value before the command
    args: tuple[str, ...]  # after "nvtopy", up to the first shell operator
    redirect: str | None  # "> FILE"


def fenced_blocks(text: str) -> list[tuple[int, str, list[str]]]:
    """(line of the opening fence, language, lines) of every fenced block."""
    blocks: list[tuple[int, str, list[str]]] = []
    current: tuple[int, str, list[str]] | None = None
    for number, line in enumerate(text.split("\n"), start=1):
        if line.startswith("```"):
            if current is None:
                current = (number, line[3:].strip(), [])
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current[2].append(line)
    return blocks


def readme_examples(text: str) -> list[Example]:
    """Every ``nvtopy`` command in the shell blocks of ``text`` (a README), continuation lines joined."""
    examples: list[Example] = []
    for start, language, lines in fenced_blocks(text):
        if language not in SHELL_LANGUAGES:
            continue
        pending, pending_line = "", 0
        for offset, line in enumerate(lines, start=1):
            if not pending:
                pending_line = start + offset
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            command, pending = pending + line, ""
            tokens = shlex.split(command, comments=True)
            env = []
            while tokens and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", tokens[0]):
                name, _, value = tokens.pop(0).partition("=")
                env.append((name, value))
            if not tokens or tokens[0] != "nvtopy":
                continue
            args = tokens[1:]
            cut = next((i for i, token in enumerate(args) if token in OPERATORS), len(args))
            rest = args[cut:]
            redirect = None
            if rest:
                if rest[0] != ">" or len(rest) != 2:
                    raise AssertionError(
                        f"README.md line {pending_line}: {command.strip()!r}: this test runs a command alone or "
                        "with '> FILE'; teach it the other shell operators before using them in the README"
                    )
                redirect = rest[1]
            examples.append(Example(pending_line, " ".join(tokens[: cut + 1]), tuple(env), tuple(args[:cut]), redirect))
    return examples


def skip_reason(example: Example) -> str | None:
    """Why ``example`` cannot run here, or None."""
    args = example.args
    command = next((arg for arg in args if arg in SUBCOMMANDS), None)
    if command in NEEDS_SERVER:
        return NEEDS_SERVER[command]
    for flag, reason in NEEDS_SERVER_FLAGS.items():
        if flag in args:
            return reason
    if command in NEEDS_TERMINAL:
        return NEEDS_TERMINAL[command]
    if command is None and not ONE_SHOT_FLAGS & set(args):
        return "the interactive monitor: needs a terminal"
    return None


def runnable_argv(example: Example, cwd: Path) -> list[str]:
    """The argv a user without a GPU runs for ``example``: the same, on simulated GPUs, stopping by itself."""
    args = list(example.args)
    command = next((arg for arg in args if arg in SUBCOMMANDS), None)
    help_only = bool({"--help", "-h", "--version"} & set(args))
    if command in READS_THE_DRIVER and not help_only and not any(arg.startswith("--demo") for arg in args):
        args.append("--demo")
    if command in RUNS_UNTIL_STOPPED and not help_only and "--count" not in args:
        args += ["--count", "1"]
    expanded: list[str] = []
    for arg in args:  # the shell's globbing, for `report run-*.jsonl`
        matches = sorted(glob.glob(arg, root_dir=cwd)) if "*" in arg else []
        expanded += matches or [arg]
    return [str(NVTOPY), *expanded]


EXAMPLES = readme_examples(README.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short recording of simulated GPUs: what `nvtopy report` and `replay` examples read."""
    path = tmp_path_factory.mktemp("recording") / "run.jsonl"
    subprocess.run(
        [str(NVTOPY), "record", str(path), "--demo", "--interval", "0.2", "--count", "3"],
        check=True,
        capture_output=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    return path


def test_the_readme_has_commands_to_run() -> None:
    assert NVTOPY.exists(), f"no nvtopy command beside {sys.executable} or on PATH: run `make install` first"
    runnable = [example for example in EXAMPLES if skip_reason(example) is None]
    assert len(runnable) >= 15, [example.text for example in runnable]


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"line{e.line}:{e.text[:60]}" for e in EXAMPLES])
def test_readme_command_runs_as_written(example: Example, recording: Path, tmp_path: Path) -> None:
    reason = skip_reason(example)
    if reason is not None:
        pytest.skip(f"README.md line {example.line}: {reason}")
    for name in ("run.jsonl", "run-1.jsonl"):  # the README's recordings, by the names it uses
        shutil.copy(recording, tmp_path / name)
    argv = runnable_argv(example, tmp_path)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("NVTOPY_", "CUDA_"))}
    env |= {"HOME": str(tmp_path), "PATH": f"{NVTOPY.parent}{os.pathsep}{env.get('PATH', '')}", "TERM": "dumb"}
    env.pop("XDG_CONFIG_HOME", None)
    env |= dict(example.env)
    if example.redirect:
        with (tmp_path / example.redirect).open("w") as out:
            done = subprocess.run(
                argv, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.PIPE, text=True, timeout=COMMAND_TIMEOUT_S
            )
    else:  # forked (tests/cli_runner.py): the '> FILE' examples and the recording above run the installed script
        done = run_nvtopy(*argv[1:], cwd=tmp_path, env=env, timeout=COMMAND_TIMEOUT_S)
    ran = shlex.join(argv[1:])
    assert done.returncode == 0, f"README.md line {example.line}: nvtopy {ran}: exit {done.returncode}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr


def test_classification() -> None:
    """The rules above, on commands of each kind (so a rule that stops matching fails here, not silently)."""
    (monitor, once, remote, exporter, log, report, replay) = readme_examples(
        "```sh\nnvtopy --view compact\nnvtopy --once --gpus 0   # a comment\n"
        "nvtopy --once --remote a:9400\nnvtopy exporter\nnvtopy log --output x.csv \\\n    --processes\n"
        "nvtopy report run-*.jsonl > r.txt\nnvtopy replay run.jsonl\n```\n"
    )
    assert [skip_reason(e) is None for e in (monitor, once, remote, exporter, log, report, replay)] == [
        False,
        True,
        False,
        False,
        True,
        True,
        False,
    ]
    assert log.args == ("log", "--output", "x.csv", "--processes")
    assert report.redirect == "r.txt"
    assert runnable_argv(once, ROOT)[1:] == ["--once", "--gpus", "0", "--demo"]
    assert runnable_argv(log, ROOT)[-3:] == ["--demo", "--count", "1"]
    with pytest.raises(AssertionError, match="shell operators"):
        readme_examples("```sh\nnvtopy --once | jq .\n```\n")


# ---------------------------------------------------------------- the first screen


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_quick_start_says_how_to_get_the_command_before_any_example() -> None:
    """After `make demo` the command is in .venv, not on PATH: the set-up says so before the first example."""
    text = README.read_text(encoding="utf-8")
    quick_start = _section(text, "## Quick start")
    assert "make demo" in quick_start and "make test" in quick_start
    for way in (". .venv/bin/activate", "pipx install .", "uv tool install ."):
        assert way in quick_start, way
    activate_line = text[: text.index(". .venv/bin/activate")].count("\n") + 1
    assert activate_line < min(example.line for example in EXAMPLES)


def test_the_page_opens_with_a_picture_then_set_up_comparison_and_contents() -> None:
    text = README.read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert headings[:3] == ["Quick start", "nvtopy beside nvitop, nvtop, gpustat and all-smi", "Contents"], headings
    assert text.index("![") < text.index("\n## Quick start")
    comparison = _section(text, "## nvtopy beside nvitop, nvtop, gpustat and all-smi")
    for peer in ("nvitop", "nvtop 3", "gpustat", "all-smi"):
        assert f"| {peer}" in comparison.split("\n|---")[0], peer
    assert "Where the figures come from" in comparison


def test_contents_lists_every_section() -> None:
    text = README.read_text(encoding="utf-8")
    contents = _section(text, "## Contents")
    for level, title in headings(text):
        if level in (2, 3) and title != "Contents":
            assert f"(#{github_anchor(title)})" in contents, title


def test_a_place_for_the_nvitop_keys_table() -> None:
    assert "<!-- keys table -->" in _section(README.read_text(encoding="utf-8"), "## For nvitop users")


def test_no_maintainer_history_in_the_readme() -> None:
    """Issue numbers and A/B history live in docs/, linked from the README."""
    text = README.read_text(encoding="utf-8")
    assert not re.search(r"\bissues? \d+", text), re.search(r".*\bissues? \d+.*", text).group(0)
    for page in ("docs/architecture.md", "docs/performance.md", "docs/exporter-internals.md", "docs/development.md"):
        assert f"]({page}" in text, page


# ---------------------------------------------------------------- links and pictures


def github_anchor(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = title.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(text: str) -> list[tuple[int, str]]:
    found = []
    fence = False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
        elif not fence and (match := re.match(r"(#{1,6}) (.+)", line)):
            found.append((len(match.group(1)), match.group(2)))
    return found


def _links(text: str) -> list[str]:
    outside_code = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return re.findall(r"\]\(([^)\s]+)\)", outside_code)


@pytest.mark.parametrize(
    "page", ["README.md", "benchmarks/README.md", *sorted(f"docs/{p.name}" for p in DOCS.glob("*.md"))]
)
def test_every_link_leads_somewhere(page: str) -> None:
    path = ROOT / page
    text = path.read_text(encoding="utf-8")
    for link in _links(text):
        if link.startswith(("http://", "https://", "mailto:")):
            continue
        target, _, anchor = link.partition("#")
        target_path = (path.parent / target).resolve() if target else path
        assert target_path.exists(), f"{page}: {link}: no such file"
        if anchor and target_path.suffix == ".md":
            anchors = {github_anchor(title) for _level, title in headings(target_path.read_text(encoding="utf-8"))}
            assert anchor in anchors, f"{page}: {link}: no such heading"


def test_every_screenshot_is_shown_and_exists() -> None:
    text = README.read_text(encoding="utf-8")
    shown = set(re.findall(r"screenshots/([\w-]+\.svg)", text))
    present = {path.name for path in SCREENSHOTS.glob("*.svg")}
    assert shown <= present, shown - present
    assert present <= shown, present - shown
    assert "main-80x24.svg" in shown


def test_screenshots_name_a_font_with_box_and_braille_glyphs() -> None:
    """Fira Code first, then fonts that have the box-drawing and braille blocks, never Fira Code alone."""
    for path in sorted(SCREENSHOTS.glob("*.svg")):
        svg = path.read_text(encoding="utf-8")
        fonts = re.search(r"-matrix \{\s*font-family: ([^;]+);", svg)
        assert fonts, path.name
        stack = [font.strip().strip('"') for font in fonts.group(1).split(",")]
        assert stack[0] == "Fira Code", (path.name, stack)
        assert {"DejaVu Sans Mono", "Menlo"} <= set(stack) and stack[-1] == "monospace", (path.name, stack)


def test_the_80x24_screenshot_is_80_by_24() -> None:
    svg = (SCREENSHOTS / "main-80x24.svg").read_text(encoding="utf-8")
    assert "(80x24)</text>" in svg
    rows = set(re.findall(r'-line-(\d+)"', svg))  # Rich clips every line but the last
    assert len(rows) + 1 == 24, len(rows)


def test_the_configuration_example_is_a_config_file_with_every_key() -> None:
    """The README's config file example reads without a warning and shows every key nvtopy knows."""
    from nvtopy.config import EXPORTER_KEYS, HEALTH_KEYS, TOP_LEVEL_KEYS, parse_config

    text = README.read_text(encoding="utf-8")
    section = text[text.index("\n## Configuration\n") :]
    example = next("\n".join(lines) for _, language, lines in fenced_blocks(section) if language == "toml")
    config, warnings = parse_config(example)
    assert warnings == [], warnings
    keys = re.findall(r"^([a-z_]+) =", example, flags=re.MULTILINE)
    assert sorted(keys) == sorted((*TOP_LEVEL_KEYS, *HEALTH_KEYS, *EXPORTER_KEYS))
    assert config.exporter_names != "dcgm-legacy", "the example shows the choice that is not the default"


def test_every_exporter_naming_is_documented() -> None:
    """``nvtopy exporter --names`` takes what the README's table of namings lists, the default first."""
    from nvtopy.formats.dcgm_naming import DEFAULT_NAMING, NAMINGS

    text = README.read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(dcgm-[^`]+)`( \(default\))? \|", text, flags=re.MULTILINE)
    assert [name for name, _ in rows] == list(NAMINGS)
    assert [name for name, default in rows if default] == [DEFAULT_NAMING]
