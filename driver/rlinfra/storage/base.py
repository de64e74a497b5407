"""What a store offers `down --delete-buckets`: counting a bucket's object versions, shown
before it asks, and emptying the bucket, so that Terraform (whose buckets are made with
force_destroy = false) never stops halfway on a bucket that still holds data."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar


class Store(ABC):
    """The buckets of one kind of storage. Instances hold no deployment state."""

    # How messages name a bucket of this store ("S3 bucket", "Cloud Storage bucket").
    kind: ClassVar[str]

    @abstractmethod
    def bucket_versions(self, folder: Path, bucket: str) -> int:
        """Object versions (and delete markers) in ``bucket`` of the deployment in ``folder``;
        0 when the bucket is gone."""

    @abstractmethod
    def empty_bucket(self, folder: Path, bucket: str) -> int:
        """Delete every object version of ``bucket`` (after `down` asked); how many went."""
