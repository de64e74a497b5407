"""The local cloud: its Cloud (``cloud``)."""
