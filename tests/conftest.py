"""Settings every test process inherits.

Brokers started by tests (``topiclake serve`` subprocesses) never take the well-known ports of a
developer's own services (8081 for the schema registry, 9092 for Kafka): those listeners are off unless a
test asks for one with an explicit, free port (a command-line option wins over the environment).
"""

from __future__ import annotations

import os

os.environ.setdefault("TOPICLAKE_SCHEMA_REGISTRY_PORT", "0")
os.environ.setdefault("TOPICLAKE_KAFKA_PORT", "0")
