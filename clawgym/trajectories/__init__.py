"""clawgym.trajectories."""
