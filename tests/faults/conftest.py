"""Fault tests reuse the gateway fixtures: real simulators and gateways on loopback."""

from tests.gateway.conftest import gateway_factory, sim_url  # noqa: F401
