"""The start of the endpoint ``metrics.listener`` asks for."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pykfk.metrics.address import parse_listener

if TYPE_CHECKING:
    from pykfk.metrics.collector import MetricsSource
    from pykfk.metrics.endpoint import MetricsEndpoint

log = logging.getLogger("pykfk.metrics")


async def start_endpoint(broker: MetricsSource, listener: str) -> MetricsEndpoint:
    """Serve ``broker``'s metrics (and the process' CPU, memory and file descriptors) at
    ``listener``; returns the started endpoint."""
    try:
        from prometheus_client import CollectorRegistry, ProcessCollector
    except ImportError:
        raise RuntimeError("metrics.listener needs the prometheus_client package: "
                           "pip install 'pykfk[metrics]'") from None
    from pykfk.metrics.collector import BrokerCollector
    from pykfk.metrics.endpoint import MetricsEndpoint

    collector = BrokerCollector(broker)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    ProcessCollector(registry=registry)
    host, port = parse_listener(listener)
    endpoint = MetricsEndpoint(registry, host, port, before_scrape=collector.refresh)
    bound_host, bound_port = await endpoint.start()
    log.info("metrics at http://%s:%d/metrics", bound_host, bound_port)
    return endpoint
