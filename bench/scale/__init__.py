"""Scale on one broker: thousands of partitions on a standalone pykfk broker process.

``python -m bench.scale --partitions 10000`` creates one topic of N partitions while
another client keeps asking ApiVersions, times Metadata of the whole topic, produces to
and consumes from every partition, and samples the broker's open files, memory and idle
CPU. Results go to ``--out`` as JSON and a PNG, with a table against the targets.
"""
