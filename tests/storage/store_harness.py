"""The object-storage tests' warehouses on each store: S3 (s3_harness.py) and Azure Blob Storage (Azurite).

Azurite (npm ``azurite``, installed by ``make tools-azurite``) runs once per test process, like the S3
server, and is stopped by its pid; each test gets a container of its own behind a counting,
fault-injecting proxy (the one the S3 tests use: Shared Key signatures cover no host, so Azurite accepts
requests re-targeted through it). The warehouse is ``abfss://<container>@devstoreaccount1.dfs.core.windows.net/wh``,
reached through ``azure_storage_endpoint`` (the proxy, path-style) with the development account's key.

``store`` runs a test once on each store (ids ``[s3]``, ``[azure]``); the tests' checks (``_s3_checks``)
read tables through delta-rs and so are the same on both. Without npm the Azure runs skip, saying so;
with npm but no Azurite they fail and say to run ``make tools-azurite``.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from s3_harness import S3Warehouse

from topiclake.objectstore import ProxyProcess
from topiclake.objectstore.azurite import AzuriteServer, azurite_binary

_containers = itertools.count()


@dataclass
class AzureWarehouse:
    """One test's container, reached through its proxy."""

    uri: str
    options: dict[str, str]
    proxy: ProxyProcess
    server: AzuriteServer
    kind: str = "azure"


Warehouse = S3Warehouse | AzureWarehouse


@pytest.fixture(scope="session")
def azurite() -> Iterator[AzuriteServer]:
    if azurite_binary() is None:
        if shutil.which("npm") is None:
            pytest.skip("npm is not installed, so Azurite (npm azurite, the Azure Storage emulator) is not")
        pytest.fail("Azurite is not installed: run `make tools-azurite`")
    server = AzuriteServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def azure(azurite: AzuriteServer) -> Iterator[AzureWarehouse]:
    container = f"lake-{next(_containers)}"
    azurite.create_container(container)
    proxy = ProxyProcess(azurite.endpoint).start()
    uri = f"abfss://{container}@{azurite.account}.dfs.core.windows.net/wh"
    try:
        yield AzureWarehouse(uri, azurite.options(proxy.endpoint), proxy, azurite)
    finally:
        proxy.stop()


@pytest.fixture(params=["s3", "azure"])
def store(request: pytest.FixtureRequest) -> Warehouse:
    """The test's warehouse on S3, then on Azure."""
    warehouse: Warehouse = request.getfixturevalue(request.param)
    return warehouse
