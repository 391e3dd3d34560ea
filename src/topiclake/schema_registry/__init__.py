"""A Confluent-compatible schema registry stored in the warehouse (``_system/schemas``).

:class:`SchemaRegistry` holds the operations (no HTTP); :func:`create_registry_app` (in
``topiclake.schema_registry.http``) serves them with Confluent's REST API; :mod:`.wire` reads and writes
Confluent's wire format (magic byte 0, 4-byte schema id, payload).
"""

from topiclake.schema_registry.compatibility import LEVELS
from topiclake.schema_registry.formats import SCHEMA_TYPES, ParsedSchema, Reference, parse
from topiclake.schema_registry.registry import RegisteredVersion, SchemaRegistry
from topiclake.schema_registry.wire import decode_wire, encode_wire

__all__ = [
    "LEVELS",
    "SCHEMA_TYPES",
    "ParsedSchema",
    "Reference",
    "RegisteredVersion",
    "SchemaRegistry",
    "decode_wire",
    "encode_wire",
    "parse",
]
