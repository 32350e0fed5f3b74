"""A tiny org.freedesktop.Notifications service for the desktop channel's tests (run by the system python3).

It owns the name on the session bus, records each Notify call as one JSON line in the file given,
and answers it ("ok") or never answers ("hang"). PyGObject (gi) is the system's, not nvtopy's:
the tests skip where it is missing. Usage: python3 notifications_service.py ok|hang RECORD_FILE
"""

import json
import sys

from gi.repository import Gio, GLib

XML = """<node><interface name="org.freedesktop.Notifications">
<method name="Notify"><arg type="s" direction="in"/><arg type="u" direction="in"/><arg type="s" direction="in"/>
<arg type="s" direction="in"/><arg type="s" direction="in"/><arg type="as" direction="in"/>
<arg type="a{sv}" direction="in"/><arg type="i" direction="in"/><arg type="u" direction="out"/></method>
<method name="GetCapabilities"><arg type="as" direction="out"/></method>
<method name="GetServerInformation"><arg type="s" direction="out"/><arg type="s" direction="out"/>
<arg type="s" direction="out"/><arg type="s" direction="out"/></method>
</interface></node>"""

mode, record = sys.argv[1], sys.argv[2]
unanswered = []  # kept, so a "hang" call is never answered (not even by its finalizer)


def on_call(connection, sender, path, interface, method, parameters, invocation):
    if method == "Notify":
        app, _replaces, _icon, summary, body, actions, hints, timeout = parameters.unpack()
        with open(record, "a", encoding="utf-8") as out:
            line = {"app": app, "summary": summary, "body": body, "actions": actions, "hints": hints}
            out.write(json.dumps({**line, "timeout": timeout}) + "\n")
        if mode == "hang":
            unanswered.append(invocation)
            return
        invocation.return_value(GLib.Variant("(u)", (len(unanswered) + 1,)))
    elif method == "GetCapabilities":
        invocation.return_value(GLib.Variant("(as)", (["body"],)))
    else:
        invocation.return_value(GLib.Variant("(ssss)", ("test", "nvtopy-tests", "1", "1.2")))


node = Gio.DBusNodeInfo.new_for_xml(XML)


def on_bus(connection, name):
    connection.register_object("/org/freedesktop/Notifications", node.interfaces[0], on_call, None, None)


def on_name(connection, name):
    print("READY", flush=True)


Gio.bus_own_name(
    Gio.BusType.SESSION, "org.freedesktop.Notifications", Gio.BusNameOwnerFlags.NONE, on_bus, on_name, None
)
GLib.MainLoop().run()
