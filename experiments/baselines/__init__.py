"""Baselines the experiments compare against: LD (full-domain
generalisation with (c,l)-diversity) and its hierarchies."""
