"""HTTP authentication and authorization (docs/security.md): the middleware, the route table, Access."""

from topiclake.api.auth.access import Access, AccessDep, access_of
from topiclake.api.auth.middleware import AuthMiddleware
from topiclake.security.inter_broker import CLIENT

__all__ = ["CLIENT", "Access", "AccessDep", "AuthMiddleware", "access_of"]
