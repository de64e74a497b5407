"""The nebius cloud: its Cloud (``cloud``), catalog (``catalog.yaml``) and ``preflight``."""
