"""``nvtopy exporter``: the command and its HTTP/TLS server."""
