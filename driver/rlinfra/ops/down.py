"""`down`: what it destroys (shown before it asks), then destroying it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rlinfra import ui
from rlinfra.clouds.registry import cloud_for
from rlinfra.deploy import cluster_lock, lock_holder, read_record, require_cluster, update_record
from rlinfra.errors import UsageError
from rlinfra.ops.endpoints import stop_tunnels
from rlinfra.ops.roots import open_root_at
from rlinfra.record import Host, Stage


@dataclass
class DownPlan:
    cluster: str
    folder: Path
    hosts: list[Host]
    buckets: list[str]
    delete_buckets: bool
    cloud: str
    # Object versions in each bucket that --delete-buckets deletes with it (clouds that count).
    contents: dict[str, int] = field(default_factory=dict)
    # Machines that stay (the ssh cloud): what `down` stops and removes on each, shown first.
    release: list[str] = field(default_factory=list)
    purge: bool = False

    def describe(self) -> list[str]:
        lines = [f"cluster {self.cluster}: {len(self.hosts)} node(s)"]
        if self.release:
            lines += self.release
        else:
            lines += [f"  destroy node {h.name} ({h.private_ip})" for h in self.hosts]
        for bucket in self.buckets:
            if not self.delete_buckets:
                lines.append(f"  keep bucket {bucket}")
                continue
            count = self.contents.get(bucket)
            data = f" and its {count} object version(s)" if count else ""
            lines.append(f"  DELETE bucket {bucket}{data}")
        return lines


def plan_down(cluster: str, delete_buckets: bool, purge: bool = False) -> DownPlan:
    from rlinfra.errors import ClusterBusyError

    folder, record = require_cluster(cluster)
    holder = lock_holder(folder)
    if holder is not None and holder["running"]:
        # Refused before the list of what would be destroyed is shown.
        raise ClusterBusyError(
            f"cluster {cluster!r} is busy: `rlinfra {holder['command']}` (pid {holder['pid']}) "
            "holds its lock",
            "Wait for it to finish; the lock is released when that command exits.",
        )
    buckets = list(record.buckets)
    cloud = record.cloud
    contents: dict[str, int] = {}
    provider = cloud_for(cloud)
    store = provider.store(folder) if delete_buckets else None
    if store is not None:
        contents = {bucket: store.bucket_versions(folder, bucket) for bucket in buckets}
    if purge and not provider.keeps_machines:
        raise UsageError(
            f"--purge: the {cloud} cloud destroys its machines; there is nothing to purge",
            "Run `down` without --purge.",
        )
    release = provider.release_lines(record, purge) if provider.keeps_machines else []
    return DownPlan(
        cluster,
        folder,
        list(record.hosts),
        buckets,
        delete_buckets,
        cloud,
        contents,
        release,
        purge,
    )


def down(todo: DownPlan) -> None:
    folder = todo.folder
    with cluster_lock(folder, "down"):
        stop_tunnels(folder)
        provider = cloud_for(todo.cloud)
        if provider.keeps_machines:
            record = read_record(folder)
            if record is not None:
                provider.release_hosts(folder, record, todo.purge)
        cluster_root = folder / "terraform" / "cluster"
        if cluster_root.is_dir():
            tf = open_root_at(folder, "cluster")
            if tf.has_state():
                tf.init()
                tf.destroy()
        update_record(folder, stage=Stage.DOWN, hosts=[], check=None)
        (folder / "ssh" / "known_hosts").unlink(missing_ok=True)
        storage_root = folder / "terraform" / "storage"
        if todo.delete_buckets and storage_root.is_dir():
            store = cloud_for(todo.cloud).store(folder)
            if store is not None:
                # Buckets are made with force_destroy = false: their data goes first, as shown
                # and confirmed, so Terraform never stops halfway on a non-empty bucket.
                for bucket in todo.buckets:
                    if todo.contents.get(bucket):
                        deleted = store.empty_bucket(folder, bucket)
                        ui.info(f"deleted {deleted} object version(s) of {bucket}")
            tf = open_root_at(folder, "storage")
            if tf.has_state():
                tf.init()
                tf.destroy()
            update_record(folder, buckets=[])
    record = read_record(folder)
    if record is None or not record.buckets:
        import shutil

        shutil.rmtree(folder)
