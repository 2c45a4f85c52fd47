"""Training: loss, learning-rate schedules, checkpoints and the loop."""
