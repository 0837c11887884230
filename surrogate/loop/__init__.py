"""The active-learning loop: proposing real runs, their launch files, and scoring each round."""
