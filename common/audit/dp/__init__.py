"""The empirical DP audit: neighbouring tables, bounds on epsilon, and one target per mechanism."""
