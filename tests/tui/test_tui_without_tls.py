"""The local monitor leaves OpenSSL out (3.3 MiB of resident memory), and a later ``import ssl`` still works."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
from nvtopy.commands.monitor import _import_app_without_tls
app = _import_app_without_tls()
assert app.__name__ == "NvtopyApp"
assert "ssl" not in sys.modules, "asyncio loaded OpenSSL"
assert "_ssl" not in sys.modules
import asyncio
async def main():
    await asyncio.sleep(0)
    return 7
assert asyncio.run(main()) == 7  # the event loop runs without TLS
import ssl  # a remote host over https later in the same process
assert ssl.create_default_context() is not None
print("ok")
"""


def test_the_app_is_imported_without_openssl_and_ssl_still_imports_later():
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_where_asyncio_is_loaded_already_nothing_changes():
    code = "import asyncio, ssl, sys\nfrom nvtopy.commands.monitor import _import_app_without_tls\n"
    code += "_import_app_without_tls()\nassert sys.modules['ssl'] is ssl\nprint('ok')\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
