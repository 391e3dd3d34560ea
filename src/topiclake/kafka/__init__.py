"""The Kafka wire protocol: unmodified Kafka clients produce to and consume from topiclake's Delta topics.

An asyncio listener (:class:`KafkaListener`) runs beside the HTTP gateway on the same event loop and the
same :class:`~topiclake.platform.Broker`. Messages are parsed and encoded with kio, record batches with
aiokafka's compiled record module; both stay behind this package's adapters. It never imports FastAPI.
"""

from topiclake.kafka import _kio  # noqa: F401  # first: kio without hypothesis
from topiclake.kafka.server import KafkaListener, KafkaListenerError
from topiclake.kafka.versions import SUPPORTED

__all__ = ["SUPPORTED", "KafkaListener", "KafkaListenerError"]
