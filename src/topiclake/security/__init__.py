"""Authentication and authorization: principals, Kafka's ACL model, users, tokens (docs/security.md).

Plain Python: no FastAPI, no pyspark, no environment variables. The HTTP middleware (``topiclake.api``)
and the Kafka listener (``topiclake.kafka``) both authenticate into a :class:`Principal` and ask the one
:class:`Authorizer` of their :class:`Security`.
"""

from topiclake.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    parse_operation,
    parse_pattern_type,
    parse_permission,
    parse_resource_type,
)
from topiclake.security.acl_table import ACL_TABLE, AclTable
from topiclake.security.authorizer import Authorizer
from topiclake.security.config import Security, security_from_settings
from topiclake.security.principal import ANONYMOUS, Principal
from topiclake.security.tokens import TokenVerifier
from topiclake.security.users import SCRAM_MECHANISMS, ScramCredential, UserStore, scram_credential

__all__ = [
    "ACL_TABLE",
    "ANONYMOUS",
    "CLUSTER_NAME",
    "SCRAM_MECHANISMS",
    "AclBinding",
    "AclFilter",
    "AclTable",
    "Authorizer",
    "Operation",
    "PatternType",
    "Permission",
    "Principal",
    "ResourceType",
    "ScramCredential",
    "Security",
    "TokenVerifier",
    "UserStore",
    "parse_operation",
    "parse_pattern_type",
    "parse_permission",
    "parse_resource_type",
    "scram_credential",
    "security_from_settings",
]
