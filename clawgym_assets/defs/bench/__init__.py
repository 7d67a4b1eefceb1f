"""Bench: suites, per-model scores, the leaderboard, their gates, the checkpoint sensor and weekly re-scoring."""
