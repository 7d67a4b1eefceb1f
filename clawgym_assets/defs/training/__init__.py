"""Training: the base model and checkpoints (SFT / GRPO as a Pipes subprocess) and the trainer resource."""
