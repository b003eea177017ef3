"""Coverage-guided fuzzing of what a broker decodes from untrusted bytes (atheris).

Targets (``targets.py``) take raw bytes and must never raise anything but the error a
broker answers with: request frames through the header decoder and every request
decoder of every served version, SASL PLAIN and SCRAM exchanges, and the compiled record
batch checks. ``python -m fuzz TARGET`` runs one under libFuzzer; ``corpus/<target>/``
holds the seeds and what runs found worth keeping, ``crashes/`` any failing input (each
one becomes a regression case run by ``tests/fuzz``).
"""
