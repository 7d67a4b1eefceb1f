"""clawgym.synth."""
