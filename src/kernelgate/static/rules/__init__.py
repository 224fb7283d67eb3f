"""One module per static rule; the registry is ``kernelgate.static.RULES``."""
