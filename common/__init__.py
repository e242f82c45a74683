"""What owners and the miner share, in layers: data <- trees <- privacy <- mechanisms <- audit <- federation (docs/architecture.md). Imports nothing from the node packages."""
