"""The miner side: pseudo-data generation (PGEN/BASEGEN) and global models."""
