"""Broker metrics: counters kept as the broker works (``stats``), their export as
Prometheus metrics under Kafka's names (``collector``) and the HTTP endpoint that serves
them (``endpoint``), started by ``serve.start_endpoint`` when ``metrics.listener`` is set
(docs/metrics.md).

Importing this package or ``stats`` costs nothing and needs no metrics library: the log,
cluster and server layers count into ``stats`` objects. ``prometheus_client`` is imported
only when the endpoint starts.
"""
