"""modelshare: privacy-preserving data mining by knowledge model sharing."""
