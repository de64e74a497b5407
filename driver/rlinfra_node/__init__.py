"""Programs that run on cluster nodes (data preparation, retrieval, training stand-ins, serving).

rlinfra copies this package onto every node and puts it on the node venv's path, so each module
runs there as ``python -m rlinfra_node.<module>``. Modules import only the standard library at
top level; third-party imports (pyarrow, torch, fastapi, faiss, ray) happen inside the functions
that need them, so the controller can import everything here without those packages.
"""
