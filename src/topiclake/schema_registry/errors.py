"""The schema registry's errors, each with Confluent's ``error_code`` (its HTTP status is the code's first
three digits); the REST layers map them (``topiclake.api.errors``, ``topiclake.schema_registry.http``)."""

from __future__ import annotations

from topiclake.errors import TopiclakeError


class SchemaRegistryError(TopiclakeError):
    """An error of the schema registry; ``error_code`` is Confluent's (HTTP status = its first 3 digits)."""

    code = "schema_registry_error"
    error_code = 50001


class SubjectNotFound(SchemaRegistryError):
    """No such subject (or every version of it is deleted)."""

    code = "subject_not_found"
    error_code = 40401


class SchemaVersionNotFound(SchemaRegistryError):
    """The subject has no such version."""

    code = "version_not_found"
    error_code = 40402


class SchemaNotFound(SchemaRegistryError):
    """No schema with this id, or the schema is not registered under the subject."""

    code = "schema_not_found"
    error_code = 40403


class SubjectSoftDeleted(SchemaRegistryError):
    """The subject was soft-deleted already (delete it with permanent=true)."""

    code = "subject_soft_deleted"
    error_code = 40404


class SubjectNotSoftDeleted(SchemaRegistryError):
    """A permanent delete of a subject that was not soft-deleted first."""

    code = "subject_not_soft_deleted"
    error_code = 40405


class SchemaVersionSoftDeleted(SchemaRegistryError):
    """The version was soft-deleted already."""

    code = "version_soft_deleted"
    error_code = 40406


class SchemaVersionNotSoftDeleted(SchemaRegistryError):
    """A permanent delete of a version that was not soft-deleted first."""

    code = "version_not_soft_deleted"
    error_code = 40407


class SubjectConfigNotFound(SchemaRegistryError):
    """The subject has no compatibility level of its own."""

    code = "subject_config_not_found"
    error_code = 40408


class IncompatibleSchema(SchemaRegistryError):
    """The schema is not compatible with the subject's earlier versions at its compatibility level."""

    code = "incompatible_schema"
    error_code = 409


class InvalidSchema(SchemaRegistryError):
    """The schema does not parse, or a reference does not resolve."""

    code = "invalid_schema"
    error_code = 42201


class InvalidSchemaVersion(SchemaRegistryError):
    """A version that is not ``latest`` nor an integer from 1."""

    code = "invalid_version"
    error_code = 42202


class InvalidCompatibilityLevel(SchemaRegistryError):
    """A compatibility level that is not one of Confluent's."""

    code = "invalid_compatibility_level"
    error_code = 42203


class InvalidMode(SchemaRegistryError):
    """A mode that is not READWRITE, READONLY or IMPORT."""

    code = "invalid_mode"
    error_code = 42204


class OperationNotPermitted(SchemaRegistryError):
    """The subject's (or the registry's) mode forbids the change."""

    code = "operation_not_permitted"
    error_code = 42205


class ReferenceExists(SchemaRegistryError):
    """The version is still referenced by another schema and cannot be deleted."""

    code = "reference_exists"
    error_code = 42206
