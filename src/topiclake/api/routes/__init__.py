"""Routers of the gateway, one module per API area."""
