"""The miner: gRPC service, verification and re-audit, durable store, study lifecycle, PGEN, mining tasks, global models."""
