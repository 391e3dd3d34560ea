"""Azure-only facts behind the store-generic tests: the probe's own Shared Key requests and what Azurite says.

Azurite checks Shared Key signatures, so a wrong key is refused (the probe says so in one line) and the
right one shows the signing is Azure's; a container that does not exist is named; the object-store append
client reads Azure's "exists" answer (409 BlobAlreadyExists) as a lost race, not as a retry.
"""

from __future__ import annotations

import base64

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from store_harness import AzureWarehouse

from topiclake.errors import StorageError
from topiclake.platform import Storage
from topiclake.platform.storage import _commit_safety
from topiclake.platform.storage.azure_client import AzureClient
from topiclake.platform.storage.sharedkey import azure_location


@pytest.fixture(autouse=True)
def _fresh_probe_cache() -> None:
    _commit_safety._verified.clear()


def test_probe_with_a_wrong_key_is_refused_in_one_line(azure: AzureWarehouse) -> None:
    wrong = base64.b64encode(b"not the account key").decode()
    options = {**azure.options, "azure_storage_account_key": wrong}
    with pytest.raises(StorageError, match="refused the key"):
        Storage(azure.uri, options).verify_commit_safety()


def test_probe_names_a_container_that_does_not_exist(azure: AzureWarehouse) -> None:
    uri = azure.uri.replace("abfss://lake-", "abfss://missing-")
    with pytest.raises(StorageError, match=r"container 'missing-\d+' does not exist"):
        Storage(uri, azure.options).verify_commit_safety()


def test_append_client_conditional_put_get_and_counts(azure: AzureWarehouse) -> None:
    location = azure_location(azure.uri, azure.options)
    assert location is not None and location.account == "devstoreaccount1" and location.prefix == "wh"
    client = AzureClient(location, deadline_s=10)
    try:
        assert client.put_if_absent("t/_delta_log/00000000000000000000.json", b"first") is True
        assert client.put_if_absent("t/_delta_log/00000000000000000000.json", b"second") is False
        assert client.get("t/_delta_log/00000000000000000000.json") == b"first"
        assert client.get("t/_delta_log/00000000000000000001.json") is None
        client.put("t/part-0.parquet", b"data")
        client.put("t/part-0.parquet", b"data2")  # an idempotent overwrite
        assert client.get("t/part-0.parquet") == b"data2"
    finally:
        client.close()
    assert client.requests == {"PUT?": 2, "GET": 3, "PUT": 2}  # the 409 was not retried


def test_emulator_option_with_azurite_url(azure: AzureWarehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    """``azure_storage_use_emulator`` alone (the documented Azurite setup): the development account's key
    and ``AZURITE_BLOB_STORAGE_URL``; delta-rs and the probe both reach the container with it."""
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", azure.proxy.endpoint)
    options = {"azure_storage_use_emulator": "true"}
    location = azure_location(azure.uri, options)
    assert location is not None and location.endpoint == f"{azure.proxy.endpoint}/devstoreaccount1"
    assert Storage(azure.uri, options).verify_commit_safety() is True
    write_deltalake(f"{azure.uri}/emu", pa.table({"a": [1, 2]}), storage_options=options)
    assert DeltaTable(f"{azure.uri}/emu", storage_options=options).to_pyarrow_table().num_rows == 2
