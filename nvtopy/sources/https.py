"""How nvtopy's HTTPS clients (``--remote``, ``--prometheus``) verify the servers they read.

The system's certificate authorities by default, as a browser does; with ``--ca-file`` only
the authorities in that PEM file, as Prometheus's own ``tls_config: ca_file`` does -- what a
fleet whose exporters or Prometheus carry certificates of a private CA needs, without
turning verification off (nvtopy has no switch for that). The host name is checked either way.

The file is read when the source is made, before the screen is taken over: a missing or
unreadable file, or one that holds no certificate, is one usage error and exit 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    import ssl

__all__ = ["client_context"]


def client_context(ca_file: str | None) -> ssl.SSLContext | None:
    """The context to verify HTTPS servers with: None (the system's CAs, made by the client when it first
    needs one) without ``ca_file``, else one that trusts only the certificates in ``ca_file``."""
    if ca_file is None:
        return None
    import ssl  # only here: the local monitor never imports it (nvtopy.commands.monitor)

    try:
        return ssl.create_default_context(cafile=ca_file)
    except (ssl.SSLError, ValueError):  # not PEM, or no certificate in it (SSLError is an OSError: first)
        raise UsageError(f"--ca-file {ca_file!r}: holds no PEM certificate") from None
    except OSError as exc:  # missing, a directory, not readable
        raise UsageError(f"--ca-file {ca_file!r}: cannot be read ({exc.strerror or exc})") from None
