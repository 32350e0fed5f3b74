"""How nvtopy's HTTPS clients (``--remote``, ``--prometheus``) verify the servers they read.

The system's certificate authorities by default, as a browser does; with ``--ca-file`` only
the authorities in that PEM file, as Prometheus's own ``tls_config: ca_file`` does -- what a
fleet whose exporters or Prometheus carry certificates of a private CA needs, without
turning verification off (nvtopy has no switch for that). The host name is checked either way.

The file is read when the source is made, before the screen is taken over, through
:func:`~nvtopy.boundedfile.read_bounded` (a regular file of at most :data:`MAX_PEM_BYTES`:
a FIFO is never waited on, ``/dev/zero`` never read without end) and handed to OpenSSL as
text: a missing or unreadable file, one of another kind or too large, or one that holds no
certificate, is one usage error and exit 2.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ...boundedfile import FileRefusedError, read_bounded
from ...errors import UsageError

if TYPE_CHECKING:
    import ssl

__all__ = ["MAX_PEM_BYTES", "client_context", "pem_certificates"]

MAX_PEM_BYTES = 4 << 20  # the system's whole CA bundle is about 220 KiB
_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]*?-----END CERTIFICATE-----")


def pem_certificates(path: str) -> str:
    """The PEM certificates of the file ``path``, as one text for OpenSSL's ``cadata``.

    Raises FileRefusedError (its reason in words): the file cannot be read, is not a regular file,
    is larger than :data:`MAX_PEM_BYTES`, or holds no PEM certificate. Text around the certificates
    (a bundle's comments, in any encoding) is left out: OpenSSL reads only the certificates anyway.
    Shared with the exporter's ``--tls-client-ca``.
    """
    found = _CERTIFICATE.findall(read_bounded(path, MAX_PEM_BYTES))
    if not found:
        raise FileRefusedError("holds no PEM certificate")
    return "\n".join(block.decode("ascii") for block in found) + "\n"


def client_context(ca_file: str | None) -> ssl.SSLContext | None:
    """The context to verify HTTPS servers with: None (the system's CAs, made by the client when it first
    needs one) without ``ca_file``, else one that trusts only the certificates in ``ca_file``."""
    if ca_file is None:
        return None
    import ssl  # only here: the local monitor never imports it (nvtopy.commands.monitor)

    try:
        certificates = pem_certificates(ca_file)
    except FileRefusedError as exc:
        raise UsageError(f"--ca-file {ca_file!r}: {exc}") from None
    try:
        return ssl.create_default_context(cadata=certificates)
    except (ssl.SSLError, ValueError):  # a block that looks like a certificate and is not one
        raise UsageError(f"--ca-file {ca_file!r}: holds no PEM certificate OpenSSL can read") from None
