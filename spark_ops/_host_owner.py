"""Whether a shard host's owner (the executor's Python daemon) still runs, and the
host's metrics log, which a later host removes once its owner is gone."""
from __future__ import annotations

import logging
import os

log = logging.getLogger("spark_ops._host")


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs. A zombie (exited, not yet reaped: under an init that does
    not reap, the executor's daemon can stay one) answers os.kill, so on Linux its state in
    /proc decides."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:             # no /proc (not Linux), or gone meanwhile: os.kill said enough
        return False
    # "pid (comm) S ...": the state follows the last ')' (comm may hold spaces and parentheses)
    return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] == b"Z"


METRICS_LOG_BYTES = 1 << 20     # a host's metrics log rotates at this size (one older file kept)


def _metrics_log(sock_path: str) -> None:
    """The one-line INFO summary per shard and batch (logger ``spark_ops.metrics``, see
    _progress.py) goes to ``<host>.metrics.log`` next to the host's log, rotated at 1 MiB
    with one older file kept. It stays after the host exits, until a host started later
    finds its owner (the executor's Python daemon) gone and removes it. The host's own
    ``.log`` keeps warnings and errors only (and is removed when empty, as before).
    SPARK_OPS_HOST_METRICS_LOG=0 turns it off."""
    if os.environ.get("SPARK_OPS_HOST_METRICS_LOG", "1").strip().lower() in ("0", "false", "no", "off"):
        return
    from logging.handlers import RotatingFileHandler
    folder = os.path.dirname(sock_path)
    _remove_stale_metrics_logs(folder)
    try:
        handler = RotatingFileHandler(sock_path[:-5] + ".metrics.log", maxBytes=METRICS_LOG_BYTES, backupCount=1)
    except OSError as e:
        log.warning("no metrics log: %s", e)
        return
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(message)s"))
    metrics = logging.getLogger("spark_ops.metrics")
    metrics.setLevel(logging.INFO)
    metrics.addHandler(handler)
    metrics.propagate = False       # the host's .log stays for warnings and errors


def _remove_stale_metrics_logs(folder: str) -> None:
    """Remove the metrics logs of hosts whose owner process is gone."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    stale = []
    for name in names:
        if not name.startswith("h") or ".metrics.log" not in name:
            continue
        try:
            owner = int(name[1:].split("-", 1)[0])
        except ValueError:
            continue
        if not _alive(owner):
            stale.append(name)
    _unlink_all(folder, stale)


def _unlink_all(folder: str, names: list) -> None:
    """Remove these files of ``folder``, each as far as it goes (another host may race us)."""
    for name in names:
        try:
            os.unlink(os.path.join(folder, name))
        except OSError:
            pass
