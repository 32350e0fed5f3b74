"""Apprise URLs against a real HTTP server on loopback: delivered, hanging, refused, rejecting; secrets kept out."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from nvtopy.errors import UsageError
from nvtopy.notify import Dispatcher, open_dispatcher, parse_channels, redacted_entry
from nvtopy.notify.channel import ChannelError
from nvtopy.notify.redact import scrub, secret_parts
from nvtopy.notify.urls import AppriseChannel

from .helpers import DEADLINE_S, Problems, Receiver, free_port, make_event, wait_for

pytestmark = pytest.mark.timeout(90)

SECRET = "Sup3rS3cretPw"


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.stop()


def test_a_json_webhook_receives_the_event_in_words(receiver):
    (channel,) = parse_channels([f"json://127.0.0.1:{receiver.port}/hook"])
    event = make_event(7, summary='GPU 1 on host-a fell off the bus; \x1b[31m"quoted"')
    channel.send(event, time.monotonic() + DEADLINE_S)
    (body,) = receiver.received()
    assert body["title"] == "FIRING critical: Xid 79 on GPU 1"
    assert body["message"].startswith('GPU 1 on host-a fell off the bus; \\x1b[31m"quoted"\n')  # escaped, not raw
    assert "What to do: Drain the node and reset the GPU." in body["message"]
    assert body["type"] == "failure"  # critical


def test_a_cleared_alert_is_a_success_without_the_action(receiver):
    from nvtopy.alerts.events import Transition

    (channel,) = parse_channels([f"json://127.0.0.1:{receiver.port}/hook"])
    channel.send(make_event(1, transition=Transition.CLEARED), time.monotonic() + DEADLINE_S)
    (body,) = receiver.received()
    assert body["title"] == "cleared: Xid 79 on GPU 1" and body["type"] == "success"
    assert "What to do" not in body["message"]


def test_a_hanging_server_delays_neither_close_nor_the_other_channel(receiver):
    hanging = Receiver(mode="hang")
    problems = Problems()
    try:
        dispatcher = open_dispatcher(
            [f"json://127.0.0.1:{hanging.port}/slow", f"json://127.0.0.1:{receiver.port}/fast"],
            problems,
            send_timeout=1.0,
        )
        for n in range(3):
            dispatcher.send(make_event(n))
        wait_for(lambda: len(receiver.received()) == 3, "the fast server to get all three while the other hangs")
        wait_for(hanging.received, "the hanging server to be reached")
        slow = f"json://127.0.0.1:{hanging.port}/slow"
        wait_for(lambda: problems.about(slow), "the slow channel's failure report")
        assert problems.about(slow) == ["failed: no answer within 1.0 s (not reported again until it works)"]
        started = time.monotonic()
        dispatcher.close(0.5)
        assert time.monotonic() - started < 0.5 + 5  # its deadline, with room for a loaded machine
    finally:
        hanging.stop()


def test_a_refused_port_is_reported_once_for_three_events_then_the_recovery_once():
    port = free_port()
    url = f"json://127.0.0.1:{port}/hook"
    problems = Problems()
    dispatcher = open_dispatcher([url], problems, send_timeout=5.0)
    server = None
    try:
        for n in range(3):
            dispatcher.send(make_event(n))
        wait_for(lambda: dispatcher.stats()[0].failed == 3, "three failed sends")
        wait_for(lambda: problems.about(url), "the failure report")
        server = Receiver(port=port)  # the server comes back on the same port
        dispatcher.send(make_event(3))
        wait_for(lambda: problems.about(url, "works again"), "the recovery report")
        assert problems.about(url) == [
            "failed: A Connection error occurred sending JSON notification to 127.0.0.1. "
            "(not reported again until it works)",
            "works again (3 alerts not delivered)",
        ]
        assert [body["message"].split("\n")[0] for body in server.received()] == [make_event(3).summary]
    finally:
        assert dispatcher.close(DEADLINE_S)
        if server is not None:
            server.stop()


def test_a_rejecting_server_is_a_failure_with_its_status():
    rejecting = Receiver(mode="reject")
    try:
        (channel,) = parse_channels([f"json://127.0.0.1:{rejecting.port}/hook"])
        with pytest.raises(ChannelError, match="500"):
            channel.send(make_event(0), time.monotonic() + DEADLINE_S)
    finally:
        rejecting.stop()


# --- secrets


def test_a_password_appears_in_no_name_description_repr_problem_or_printed_entry():
    url = f"json://alice:{SECRET}@127.0.0.1:{free_port()}/hook"
    problems = Problems()
    dispatcher = open_dispatcher([url], problems, send_timeout=5.0)
    try:
        (channel,) = dispatcher.channels
        dispatcher.send(make_event(0))
        wait_for(lambda: problems.items, "the failure report")
        shown = [channel.name, channel.description, repr(channel), problems.all_text(), redacted_entry(url)]
        shown += [str(stats) for stats in dispatcher.stats()]
        assert all(SECRET not in text for text in shown), shown
        assert channel.name == f"json://alice:****@127.0.0.1:{url.split(':')[3]}"
    finally:
        assert dispatcher.close(DEADLINE_S)


@pytest.mark.parametrize(
    ("url", "secrets"),
    [
        (f"slack://T0000AAAA/B0000BBBB/{SECRET}", [SECRET]),
        (f"tgram://123456789:{SECRET}/987654", [SECRET, "123456789"]),
        (f"mailto://bob:{SECRET}@example.com", [SECRET]),
        (f"ntfy://bob:{SECRET}@ntfy.example.com/topic", [SECRET]),
    ],
)
def test_service_tokens_are_masked_in_what_is_shown(url, secrets):
    channel = AppriseChannel(url)
    for text in (channel.name, channel.description, repr(channel), redacted_entry(url)):
        for secret in secrets:
            assert secret not in text, text
    assert channel.scrub(f"error posting to {url}") == channel.scrub(f"error posting to {url}").replace(SECRET, "")
    assert SECRET not in channel.scrub(f"error posting to {url}")


@pytest.mark.parametrize(
    "url",
    [
        f"json://host/x?+X-Token={SECRET}",
        f"json://host/x?:apikey={SECRET}",
        f"jsons://h/x?+Authorization=Bearer%20{SECRET}",
    ],
)
def test_a_token_in_a_header_or_a_payload_extra_is_not_shown_either(url):
    channel = AppriseChannel(url)
    for text in (
        channel.name,
        channel.description,
        repr(channel),
        redacted_entry(url),
        channel.scrub(f"failed: {url}"),
    ):
        assert SECRET not in text, text


def test_the_scrubber_masks_what_the_privacy_form_left_out():
    raw = f"json://alice:{SECRET}@host:8080/path%2Fx?token=abc123"
    shown = "json://alice:****@host:8080/path%2Fx?token=a...3"
    secrets = secret_parts(raw, shown)
    assert SECRET in secrets and "abc123" in secrets and "alice" not in secrets and "8080" not in secrets
    assert scrub(f"failed for {raw}", secrets) == "failed for json://alice:****@host:8080/path%2Fx?token=****"


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (
            ["bell", f"bogus://{SECRET}@host"],
            "[alerts] channels entry 2: 'bogus://…': apprise knows no service 'bogus'",
        ),
        ([f"json://{SECRET}:"], "[alerts] channels entry 1: 'json://…': not a json:// URL apprise accepts"),
        ([f"slack://{SECRET}"], "[alerts] channels entry 1: 'slack://…': not a slack:// URL apprise accepts"),
    ],
)
def test_a_bad_url_is_a_one_line_usage_error_without_its_secret(entries, message):
    with pytest.raises(UsageError) as caught:
        parse_channels(entries)
    text = str(caught.value)
    assert text.startswith(message) and SECRET not in text and "\n" not in text


def test_redacted_entry_never_shows_a_token_of_a_url_apprise_cannot_parse():
    assert redacted_entry(f"slack://{SECRET}") == "slack://…"
    assert redacted_entry(f"json://alice:{SECRET}@host/x") == "json://alice:****@host/x"
    assert redacted_entry(f"command:curl -H 'Authorization: {SECRET}' x") == "command:curl …"


@pytest.mark.parametrize("setup", ["", "import logging; logging.basicConfig(level=logging.DEBUG)"])
def test_apprise_logs_nothing_to_stderr_about_a_bad_url(setup):
    """Apprise logs an unparseable URL in full: with no logging set up, Python's last resort would print it to
    stderr; with a root handler (a command that sets logging up), it would propagate there."""
    script = (
        f"{setup}\n"
        "from nvtopy.notify import parse_channels\n"
        f"for entry in ['json://host/x', 'sl@ck://{SECRET}', 'slack://{SECRET}']:\n"
        "    try:\n"
        "        parse_channels([entry])\n"
        "    except Exception as exc:\n"
        "        print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert done.stderr == ""


def test_a_dispatcher_of_apprise_channels_is_an_ordinary_dispatcher(receiver):
    channels = parse_channels([f"json://127.0.0.1:{receiver.port}/a", f"json://127.0.0.1:{receiver.port}/b"])
    with Dispatcher(channels) as dispatcher:
        dispatcher.send(make_event(0))
        wait_for(lambda: len(receiver.received()) == 2, "both URLs to be posted to")
