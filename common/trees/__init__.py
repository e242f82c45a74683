"""The released model's shape: trees, paths, rebuilt counts, regression trees, metrics, local learners."""
