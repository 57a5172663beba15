"""A lake writer run as a separate process by the kill tests.

``python -m tests.storage.writer_process CONFIG_JSON KEY PAUSE_AT`` commits claims of rounds 1
and 2 plus their edges (three data files) under KEY, but stops at PAUSE_AT, prints ``READY``
and sleeps until killed:

- ``data-file-2``: while the second data file is being written (local: its hidden temporary
  file is complete but not renamed; S3: its PUT request is about to be sent);
- ``record``: after every data file is written, just before the commit record is created.

The pause points wrap the real store (a standard botocore event hook on S3); nothing of the
lake's own logic is replaced.
"""

from __future__ import annotations

import json
import os
import sys
import time

import polars as pl

from storage.config import LakeConfig
from storage.filesystem import LocalStore
from storage.lake import Lake
from tests.storage.sample_rows import claims, edges


def _pause() -> None:
    print("READY", flush=True)
    time.sleep(600)


def main() -> None:
    config, key, pause_at = LakeConfig(**json.loads(sys.argv[1])), sys.argv[2], sys.argv[3]
    lake = Lake.open(config)
    store = lake.store
    if pause_at == "record":
        real_create = store.create_bytes

        def create_then_pause(rel: str, data: bytes) -> bool:
            _pause()
            return real_create(rel, data)

        store.create_bytes = create_then_pause  # type: ignore[method-assign]
    elif isinstance(store, LocalStore):
        real_fsync, calls = os.fsync, []

        def fsync_then_pause(fd: int) -> None:
            real_fsync(fd)
            calls.append(fd)
            if len(calls) == 2:
                _pause()

        os.fsync = fsync_then_pause
    else:
        puts = []

        def before_put(**_: object) -> None:
            puts.append(1)
            if len(puts) == 2:
                _pause()

        store._s3.meta.events.register("before-send.s3.PutObject", before_put)
    rows = pl.concat([claims(20, 50, 1, prefix="k1-"), claims(20, 50, 2, prefix="k2-")])
    lake.commit(key, {"claims": rows, "edges": edges(rows)})
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
