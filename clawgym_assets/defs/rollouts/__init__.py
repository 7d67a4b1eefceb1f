"""Rollouts: trajectories, steps and the SFT set; the sandboxes, policies, runtime and judge a rollout uses."""
