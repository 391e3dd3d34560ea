"""The schema registry's table ``<warehouse>/_system/schemas``: one row per change, append-only.

``kind`` is ``schema`` (a version registered: subject, version, schema_id, schema_type, schema,
references as JSON), ``soft_delete`` / ``hard_delete`` (of subject and version), ``config`` (subject, or
null for the global level; ``value`` the level, null to remove it) or ``mode`` (the same for modes).
``seq`` numbers the rows from 1 without gaps; it is also the table's ``txn`` version (the write fence).
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

#: Name below ``<warehouse>/_system``.
SCHEMAS_TABLE: Final = "schemas"

SCHEMAS_SCHEMA: Final = pa.schema(
    [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("subject", pa.string()),
        pa.field("version", pa.int32()),
        pa.field("schema_id", pa.int64()),
        pa.field("schema_type", pa.string()),
        pa.field("schema", pa.string()),
        pa.field("references", pa.string()),
        pa.field("value", pa.string()),
        pa.field("ts_ms", pa.int64(), nullable=False),
    ]
)
