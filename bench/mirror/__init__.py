"""Mirror throughput against a plain consume-and-produce loop with the same clients
(``python -m bench.mirror``)."""
