"""Suite-wide settings: no gateway a test starts listens on Kafka's 9092 unless the test asks for a port.

``TOPICLAKE_KAFKA_PORT=0`` reaches in-process ``GatewaySettings()`` and every ``topiclake serve`` subprocess
(they inherit the environment); tests of the Kafka listener pass a free port explicitly.
"""

from __future__ import annotations

import os

os.environ.setdefault("TOPICLAKE_KAFKA_PORT", "0")
