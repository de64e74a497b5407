"""`python -m rlinfra.cli`: the same as the `rlinfra` command."""

from rlinfra.cli import main

main()
