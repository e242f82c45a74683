"""Shared core: schema, tree model, learners, measures, datasets. Imports nothing from the node packages."""
