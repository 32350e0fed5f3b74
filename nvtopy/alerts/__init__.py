"""When to tell someone: the alert rules, one set for a machine and for a fleet.

Pure (standard library, the top-level modules and ``health/`` only): :mod:`.catalog` names each
rule -- what it watches, how bad it is, what it means and what to do, its default thresholds --
once. ``nvtopy rules`` writes it as Prometheus alerting rules
(:mod:`nvtopy.formats.prometheus.rules`); an engine that evaluates the same rules on one
machine's snapshots reads the same catalog.
"""
