"""A real Redis (Debian's package) on 127.0.0.1, for Docket's Redis backend: a task store that outlives the
server process."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.subprocess_servers import free_port, require_debian_binary, stop_process, wait_for_port


@contextmanager
def running_redis(workdir: Path) -> Iterator[str]:
    """A Redis of the test's own, with nothing saved to disk; yields its URL."""
    port = free_port()
    process = subprocess.Popen(
        [require_debian_binary("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_port(port, process)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop_process(process)
