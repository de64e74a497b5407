"""The gcp cloud: its Cloud (``cloud``), machine catalog (``catalog``, ``catalog.yaml``) and
preflight (``preflight``)."""
