"""``devicestate-dev stack down --purge`` deletes the worker's RocksDB with the topics: the new
user's next demo failed on it (Faust: "the persisted offset for changelog topic ... is higher
than the last offset")."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.stack.cli import _purge_worker_data


def test_the_worker_data_dir_goes_with_the_topics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "worker"
    (data / "tables").mkdir(parents=True)
    (data / "tables" / "CURRENT").write_text("MANIFEST-000001\n")
    monkeypatch.setenv("DEVICESTATE_WORKER_DATA_DIR", str(data))
    _purge_worker_data()
    assert not data.exists()
    _purge_worker_data()  # nothing left: nothing to do, no error
