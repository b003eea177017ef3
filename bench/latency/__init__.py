"""End-to-end latency on one broker, in the OpenMessaging Benchmark's style.

A producer process sends 1 KiB records at a fixed rate (acks=all, linger.ms=1) to an
8-partition topic; a consumer process, long-polling, reads them. Each record's key is
its send time (CLOCK_MONOTONIC, shared by processes on one host), so the consumer gets
the end-to-end latency of every record and the producer the ack latency from its
delivery reports. After a warm-up, a measured window gives the percentiles, the broker's
CPU time per request and per record (requests counted by the clients themselves, from
librdkafka's statistics), and plots. The same workload against librdkafka's built-in
mock cluster (no broker at all) is the floor the clients alone impose.

    python -m bench.latency --rate 20000 --seconds 20 --target both
"""
