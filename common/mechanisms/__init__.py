"""How a model is made safe: the mechanism registry, the one release() entry point, one module per mechanism."""
