"""The public description of a table (Schema, RegressionSchema, tasks) and getting rows into the encoded form."""
