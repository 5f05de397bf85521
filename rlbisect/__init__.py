"""rlbisect: regression hunting for reinforcement-learning training code."""

__version__ = "0.1.0"
