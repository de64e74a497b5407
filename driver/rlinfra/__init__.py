"""rlinfra: Ray clusters for RL post-training, from a profile to a served model."""

__version__ = "0.1.0"
