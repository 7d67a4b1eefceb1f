"""clawgym.train."""
