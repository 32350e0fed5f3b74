"""One HTTP exchange for ``--remote`` and ``--prometheus`` (``nvtopy.sources.remote.fetch``), one excerpt helper.

The limits of reading a peer (the chunk, the grace past a deadline, the bounded read loop, basic
auth) were written twice, each copy with its own constants; the quoting of outside text in a
one-line message three times. These tests fail if a second copy comes back, and pin what each
caller's quoting writes (it must not change when the helpers are shared).
"""

from __future__ import annotations

import ast
import re
import urllib.parse

import pytest

from nvtopy.sources.remote.fetch import CHUNK, GRACE, basic_authorization
from nvtopy.textsafe import excerpt

from ...package_source import PACKAGE, modules, nodes, reads_the_package


def _where(test) -> list[str]:
    return sorted({str(path.relative_to(PACKAGE)) for path in modules() for node in nodes(path) if test(node)})


# The tests that search the package's source: parsed once a run, on one worker (tests/package_source.py).
reads_the_source = reads_the_package


def _assigns(node: ast.AST, name: str) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)


@reads_the_source
@pytest.mark.parametrize("constant", ["CHUNK", "GRACE"])
def test_the_exchange_limits_are_defined_once(constant):
    assert _where(lambda node: _assigns(node, constant)) == ["sources/remote/fetch.py"]


@reads_the_source
def test_one_bounded_reading_loop_and_one_basic_auth():
    def calls(attribute: str):
        return lambda node: (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attribute
        )

    assert _where(calls("read1")) == ["sources/remote/fetch.py"], "a body is read by fetch.read_body only"
    assert _where(calls("b64encode")) == ["sources/remote/fetch.py"], "basic auth is made by fetch only"
    assert _where(calls("decompressobj")) == ["sources/remote/fetch.py"], "gzip is undone, bounded, by fetch only"


@reads_the_source
def test_one_excerpt_helper():
    defines = _where(lambda n: isinstance(n, ast.FunctionDef) and re.fullmatch(r"_?excerpt", n.name) is not None)
    assert defines == ["textsafe.py"]


def test_basic_authorization():
    parts = urllib.parse.urlsplit("http://al%40ice:p%3Aw@host:9400/metrics")
    assert basic_authorization(parts) == "Basic YWxAaWNlOnA6dw=="  # al@ice:p:w
    assert basic_authorization(urllib.parse.urlsplit("http://host:9400")) is None
    assert CHUNK == 64 * 1024 and GRACE == 0.2


# ----------------------------------------------------------------- what each caller's quoting writes


def test_a_recordings_value_is_made_visible_and_cut_character_by_character():
    assert excerpt("short") == "short"
    assert excerpt("x" * 100) == "x" * 100
    assert excerpt("x" * 101) == "x" * 99 + "…"
    assert excerpt("ab\x1bcd", 4) == "ab\\…", "the escape is cut (as replay always did)"
    assert excerpt(None) == "None" and excerpt("") == ""


def test_a_servers_text_is_cut_with_dots_within_the_limit_and_left_as_it_is():
    assert excerpt("a\x1bb", 10, mark="...", safe=False) == "a\x1bb", "the views make it safe"
    assert excerpt("y" * 21, 20, mark="...", safe=False) == "y" * 17 + "..."


def test_a_peers_words_keep_escapes_whole_and_the_dots_past_the_limit():
    quoted = {"mark": "...", "whole_escapes": True, "mark_within": False}
    assert excerpt("z" * 48, 48, **quoted) == "z" * 48
    assert excerpt("z" * 49, 48, **quoted) == "z" * 48 + "..."
    assert excerpt("z" * 47 + "\x1b", 48, **quoted) == "z" * 47 + "...", "an escape is never cut in half"
    assert excerpt("SSH-\xe9\x9b", 48, ascii_only=True, **quoted) == "SSH-\\xe9\\x9b"
    assert excerpt("\u202eabc", 48, **quoted) == "\\u202eabc"
