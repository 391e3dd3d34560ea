"""Where the warehouse lives and how a commit is made safe there: :class:`Storage` (a local directory or an
object store, picked by URI scheme), the commit-safety probe of S3 stores, log leases and writer intents in
``_system/leases``, and reading a Delta table's ``txn`` state from snapshots that log cleanup outran."""

from topiclake.platform.storage.delta_state import StateReader, read_txn
from topiclake.platform.storage.leases import LeaseKind, LogLease, active_leases
from topiclake.platform.storage.warehouse import Storage

__all__ = ["LeaseKind", "LogLease", "StateReader", "Storage", "active_leases", "read_txn"]
