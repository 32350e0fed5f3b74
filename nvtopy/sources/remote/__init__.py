"""Other machines: their exporters (``--remote``), a Prometheus server (``--prometheus``), TLS, accounting."""
