"""The ssh cloud: its Cloud (``cloud``) and preflight (``preflight``)."""
