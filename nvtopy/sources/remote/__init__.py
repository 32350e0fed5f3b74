"""Other machines: their exporters (``--remote``), a Prometheus server (``--prometheus``), SSH (``ssh/``: ``--ssh``),
TLS, accounting."""
