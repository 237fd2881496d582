"""Shared test configuration: the SSH servers of the SSH target tests (see
``ssh_fixtures``) and the hypothesis profile; everything else lives beside its
tests."""

from hypothesis import HealthCheck, settings
from ssh_fixtures import fault_server, open_target, openssh_server, ssh_connect  # noqa: F401

# CI machines are shared and slow at times: generating examples may take
# longer than hypothesis's default patience, and a slow example is not a
# failure. Every property still runs its full number of examples.
settings.register_profile("mevedel", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("mevedel")
