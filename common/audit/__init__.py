"""Re-checking releases: every claim re-derived from the released numbers, and the empirical DP audit."""
