"""Synthesis: personas, skills, imported and synthetic tasks, mock workspaces, verifiers and their gates."""
