"""clawgym.agent."""
