"""Prometheus text exposition under dcgm-exporter's names, both ways (one module per job).

- :mod:`~nvtopy.formats.prometheus.series`: what nvtopy exports beyond dcgm's names
  (:mod:`nvtopy.formats.dcgm`): its own GPU series, and the per-NVLink, per-MIG-device and
  per-process series with their labels;
- :mod:`~nvtopy.formats.prometheus.collect`: a snapshot as prometheus-client metric families
  (:class:`~nvtopy.formats.prometheus.collect.SnapshotCollector`);
- :mod:`~nvtopy.formats.prometheus.expose`: those families as the text ``nvtopy exporter``
  answers, rendered once per snapshot (:class:`~nvtopy.formats.prometheus.expose.Exposition`);
- :mod:`~nvtopy.formats.prometheus.parse`: an exporter's answer (nvtopy's or dcgm-exporter's)
  read back into GPUs and processes (:func:`~nvtopy.formats.prometheus.parse.parse_exposition`),
  trusting nothing in it;
- :mod:`~nvtopy.formats.prometheus.rules`: the alert catalog (:mod:`nvtopy.alerts.catalog`) as a
  Prometheus rule file: PromQL over these series, Go templates, YAML (``nvtopy rules``).

Nothing is re-exported here: each name has one home, imported from its module.
"""
