"""The Ansible tests' hosts: a testbed of two namespaced hosts with their own sshd, /opt and
/tmp (helpers.netbed), made for a module and removed with everything it made at the module's
end. Its names and subnet are its own, so two test processes can each have one at once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from helpers.netbed import Testbed, missing_requirements, setup


# Module scope: the hosts and their Ray go when the module's tests end, not at the end of the
# whole run (they kept a 2-node Ray busy beside every later suite).
@pytest.fixture(scope="module")
def testbed() -> Iterator[Testbed]:
    problems = missing_requirements()
    if problems:
        pytest.skip(
            "the Ansible host tests need a machine that can make network namespaces: "
            + ", ".join(problems)
        )
    bed = setup(2)
    try:
        yield bed
    finally:
        bed.teardown()
    left = bed.leftovers()
    assert not left, f"the testbed left {left}"
