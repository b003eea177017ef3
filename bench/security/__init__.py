"""What TLS and SASL cost: throughput and broker CPU per MB against PLAINTEXT."""
