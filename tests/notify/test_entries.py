"""The ``[alerts] channels`` strings: what each kind parses to, and one-line errors that name the entry."""

from __future__ import annotations

import pytest

from nvtopy.errors import UsageError
from nvtopy.notify import Dispatcher, open_dispatcher, parse_channels, redacted_entry
from nvtopy.notify.bell import BellChannel
from nvtopy.notify.command import CommandChannel
from nvtopy.notify.desktop import DesktopChannel
from nvtopy.notify.urls import AppriseChannel

from .helpers import DEADLINE_S

pytestmark = pytest.mark.timeout(60)


def test_each_kind_of_entry():
    bell, desktop, command, url = parse_channels(
        ["bell", " desktop ", "command:/usr/local/bin/page-me --team gpu", "ntfy://gpu-alerts"]
    )
    assert isinstance(bell, BellChannel) and isinstance(desktop, DesktopChannel)
    assert isinstance(command, CommandChannel) and command.argv == ["/usr/local/bin/page-me", "--team", "gpu"]
    assert isinstance(url, AppriseChannel) and url.name == "ntfys://gpu-alerts"
    assert [channel.name for channel in (bell, desktop, command)] == ["bell", "desktop", "command:page-me"]


def test_a_command_is_split_like_a_shell_would():
    (command,) = parse_channels(["command:'/opt/my hook/run' 'two words' \"three\""])
    assert command.argv == ["/opt/my hook/run", "two words", "three"]


def test_nothing_configured_is_no_channel():
    assert parse_channels([]) == []


def test_urls_that_differ_in_their_query_only_are_two_channels_named_by_place():
    channels = parse_channels(["json://h/x?+X-Team=a", "json://h/x?+X-Team=b", "command:a", "command:b", "json://h/y"])
    assert [channel.name for channel in channels] == [
        "json://h/x",
        "json://h/x #2",
        "command#3:a",
        "command#4:b",
        "json://h/y",
    ]


def test_a_repeated_entry_is_one_channel():
    assert [channel.name for channel in parse_channels(["bell", "bell", "json://h/x", " json://h/x"])] == [
        "bell",
        "json://h/x",
    ]


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (["bell", "belll"], "[alerts] channels entry 2: unknown channel 'belll'; expected 'bell', 'desktop'"),
        (["Desktop"], "[alerts] channels entry 1: unknown channel 'Desktop'"),
        ([""], "[alerts] channels entry 1: unknown channel ''"),
        (["user:Sup3rS3cret@host"], "[alerts] channels entry 1: unknown channel this entry; expected"),
        (["bell", 3], "[alerts] channels entry 2: expected a string ('bell', 'desktop', "),
    ],
)
def test_a_bad_entry_is_a_one_line_usage_error_naming_its_place(entries, message):
    with pytest.raises(UsageError) as caught:
        parse_channels(entries)
    text = str(caught.value)
    assert text.startswith(message), text
    assert "\n" not in text and "Sup3rS3cret" not in text
    assert caught.value.exit_code == 2


def test_the_setting_name_can_be_given():
    with pytest.raises(UsageError, match=r"^--notify entry 1: unknown channel"):
        parse_channels(["nope"], setting="--notify")


@pytest.mark.parametrize(
    ("entry", "shown"),
    [
        ("bell", "bell"),
        ("desktop", "desktop"),
        ("command:/bin/page-me --token Sup3rS3cret", "command:/bin/page-me …"),
        ("command:/bin/page-me", "command:/bin/page-me"),
        ("json://bob:Sup3rS3cret@host:8080/hook", "json://bob:****@host:8080/hook"),
        ("tgram://123456789:Sup3rS3cretToken/42", "tgram://1...n/42/"),
        ("bogus://Sup3rS3cret", "bogus://…"),
        ("Sup3rS3cret", "…"),
    ],
)
def test_redacted_entry_is_safe_to_print(entry, shown):
    assert redacted_entry(entry) == shown


def test_open_dispatcher_checks_every_entry_before_starting_anything():
    import threading

    before = set(threading.enumerate())
    with pytest.raises(UsageError, match="entry 2"):
        open_dispatcher(["bell", "nope"])
    assert set(threading.enumerate()) <= before
    dispatcher = open_dispatcher(["bell"], capacity=5, overflow="drop-newest", send_timeout=2.0)
    assert isinstance(dispatcher, Dispatcher) and [channel.name for channel in dispatcher.channels] == ["bell"]
    assert dispatcher.close(DEADLINE_S)


def test_apprise_is_imported_only_when_a_url_is_configured():
    """Importing apprise costs about 0.2 s: a user without a URL channel must not pay it."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from nvtopy.notify import open_dispatcher\n"
        "open_dispatcher(['bell', 'desktop', 'command:/bin/true']).close(5)\n"
        "print('apprise' in sys.modules)\n"
        "open_dispatcher(['json://localhost/x']).close(5)\n"
        "print('apprise' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["False", "True"], done.stderr
