"""The owner daemon side: local training and the release of safe models."""
