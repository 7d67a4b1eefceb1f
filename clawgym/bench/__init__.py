"""clawgym.bench."""
