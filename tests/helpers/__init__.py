"""What the tests share, imported as ``helpers.<module>`` (tests/ is on pytest's pythonpath).

- ``paths``: the repository, the venv's bin folder, the test cache.
- ``locks``: a file lock for cache fills that two test processes may start at once.
- ``cli``: the CLI run in-process (the ``cli`` fixture) or as a program (``Rlinfra``).
- ``emulators``: the AWS API emulator (moto) and the GCS JSON API emulator.
- ``terraform``: the provider mirror, a clean Terraform environment, a Terraform runner.
- ``hcl``: HCL parsing and the check of rendered HCL against a provider's schema.
- ``netbed``: hosts in network namespaces (bridge, veths, sshd), unique per run, on a claimed
  subnet.
- ``cluster``: an rlinfra cluster driven through the CLI in the end-to-end tests.
- ``ansible``: a playbook run as the driver runs it, the offline wheelhouse.
- ``verl``: node programs' environment and Ray nodes of the Verl tests.
- ``contexts``: fixed render contexts for golden files.

No test module imports another; each layer's conftest.py holds its fixtures.
"""
