"""A local ``nvtopy --once`` imports argparse without gettext where no translation of its words can exist.

Why it matters: gettext's and locale's imports and catalogue look-ups were about 2.5 ms of a one-shot's
90 ms of CPU. What must hold: argparse's every word is what gettext itself answers -- the word unchanged
where no catalogue can be found, the catalogue's translation where one is (then gettext itself answers);
``ngettext``'s singular for 1 only; only the program's one-shot entry does it.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest

from nvtopy.commands import once_gettext

WORDS = (
    "usage: ",
    "options",
    "positional arguments",
    "show this help message and exit",
    "%(prog)s: error: %(message)s",
)


def _catalogue(path, translations: dict[str, str]) -> None:
    """A GNU ``.mo`` file (the format gettext reads) holding ``translations``."""
    keys = sorted(translations)
    ids = [k.encode() for k in keys]
    strs = [translations[k].encode() for k in keys]
    start = 7 * 4 + 16 * len(keys)
    offsets, data = [], b""
    for text in ids + strs:
        offsets.append((len(text), start + len(data)))
        data += text + b"\0"
    header = struct.pack("<7I", 0x950412DE, 0, len(keys), 28, 28 + 8 * len(keys), 0, 0)
    table = b"".join(struct.pack("<2I", *pair) for pair in offsets)
    path.parent.mkdir(parents=True)
    path.write_bytes(header + table + data)


@pytest.fixture
def no_gettext(monkeypatch, tmp_path):
    """gettext not imported (pytest has imported it: removed for the test, put back after) and Python's prefix a
    folder of the test's, without share/locale."""
    monkeypatch.delitem(sys.modules, "gettext")
    monkeypatch.setattr(sys, "base_prefix", str(tmp_path))
    monkeypatch.setenv("LANGUAGE", "xx")
    return tmp_path


@pytest.mark.timeout(30)
def test_without_a_catalogue_folder_the_words_are_gettexts_own_answers(no_gettext):
    assert not once_gettext.catalogues_possible()
    for word in WORDS:
        assert once_gettext.gettext(word) == word
    for n in (0, 1, 2, 7):
        assert once_gettext.ngettext("ambiguous option", "ambiguous options", n) == (
            "ambiguous option" if n == 1 else "ambiguous options"
        )
    assert "gettext" not in sys.modules, "answered without importing gettext"
    import gettext  # the real one, with no catalogue: the same answers

    assert [gettext.gettext(w) for w in WORDS] == list(WORDS)
    assert [gettext.ngettext("a", "b", n) for n in (0, 1, 2, 7)] == ["b", "a", "b", "b"]


@pytest.mark.timeout(30)
def test_where_a_catalogue_can_be_found_gettext_itself_answers(no_gettext):
    _catalogue(no_gettext / "share" / "locale" / "xx" / "LC_MESSAGES" / "messages.mo", {"options": "Optionen"})
    assert once_gettext.catalogues_possible()
    assert once_gettext.gettext("options") == "Optionen"
    assert once_gettext.gettext("usage: ") == "usage: "
    assert once_gettext.ngettext("a", "b", 0) == "b"


@pytest.mark.timeout(30)
def test_once_gettext_is_imported_its_state_decides(no_gettext):
    import gettext

    assert once_gettext.catalogues_possible()  # its domain or folders may have been changed: it answers
    gettext.bindtextdomain("messages", str(no_gettext / "elsewhere"))
    _catalogue(no_gettext / "elsewhere" / "xx" / "LC_MESSAGES" / "messages.mo", {"usage: ": "Aufruf: "})
    assert once_gettext.gettext("usage: ") == "Aufruf: "


# The program's entry with its command replaced: the monitor's parser's help, and whether gettext was imported.
_PROGRAM = (
    "import sys\n"
    "from nvtopy.commands import dispatch\n"
    "from nvtopy.backends.nvml import headstart\n"
    "headstart.begin = lambda *a, **k: None  # no driver here\n"
    "def main():\n"
    "    from nvtopy.commands.monitor import build_parser\n"
    "    print(build_parser().format_help())\n"
    "    print('gettext' in sys.modules)\n"
    "    return 0\n"
    "dispatch.main = main\n"
    "sys.argv = ['nvtopy', *sys.argv[1:]]\n"
    "dispatch.console()\n"
)


@pytest.mark.timeout(120)
def test_the_one_shots_parser_says_what_any_other_runs_says_without_gettext_where_none_can_translate():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    one_shot = subprocess.run(
        [sys.executable, "-c", _PROGRAM, "--once"], capture_output=True, text=True, timeout=60, check=True, env=env
    )
    other = subprocess.run(
        [sys.executable, "-c", _PROGRAM, "--demo"], capture_output=True, text=True, timeout=60, check=True, env=env
    )
    help_once, imported_once = one_shot.stdout.rsplit("\n", 2)[:2]
    help_other, imported_other = other.stdout.rsplit("\n", 2)[:2]
    assert help_once == help_other and "--once" in help_once
    assert imported_other == "True"
    expected = "True" if os.path.isdir(os.path.join(sys.base_prefix, "share", "locale")) else "False"
    assert imported_once == expected
