"""Cloud Storage buckets through the JSON API. The cloud that picks this store hands it its
Google API plumbing (``GoogleApi``: a session and base URL, one request, an error's message), so
the store never imports a cloud."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rlinfra.errors import OperationError, UsageError
from rlinfra.storage.base import Store


@dataclass(frozen=True)
class GoogleApi:
    # A requests-style session and the JSON API's base URL (Google's, or an emulator's).
    connect: Callable[[], tuple[Any, str]]
    # One request: (session, method, url, what, **kwargs) -> response; UsageError when the
    # credentials are refused or nothing answers.
    call: Callable[..., Any]
    # The message of an error answer.
    error_message: Callable[[Any], str]


def _failed(bucket: str, exc: UsageError) -> OperationError:
    """A bucket operation that failed midway is an operation error (exit 1), not bad usage."""
    return OperationError(
        f"Cloud Storage bucket {bucket}: {exc.message}",
        exc.hint or "Check the credentials and the network, then run the same command again.",
    )


class GcsStore(Store):
    kind = "Cloud Storage bucket"

    def __init__(self, api: GoogleApi) -> None:
        self.api = api

    def _generations(self, session: Any, base: str, bucket: str) -> list[tuple[str, str]]:
        """(name, generation) of every object version in ``bucket``; [] when it is gone."""
        url = f"{base}/storage/v1/b/{quote(bucket, safe='')}/o"
        found: list[tuple[str, str]] = []
        token: str | None = None
        while True:
            params = {"versions": "true", "maxResults": "1000"}
            if token:
                params["pageToken"] = token
            response = self.api.call(session, "GET", url, f"list bucket {bucket}", params=params)
            if response.status_code == 404:
                return []
            if response.status_code != 200:
                raise OperationError(
                    f"cannot list bucket {bucket}: {self.api.error_message(response)}"
                )
            body = response.json()
            found += [
                (str(i["name"]), str(i.get("generation") or "")) for i in body.get("items") or []
            ]
            token = body.get("nextPageToken")
            if not token:
                return found

    def bucket_versions(self, folder: Path, bucket: str) -> int:
        """Object versions (live and noncurrent generations) in ``bucket``; 0 when it is gone."""
        try:
            session, base = self.api.connect()
            return len(self._generations(session, base, bucket))
        except UsageError as exc:
            raise _failed(bucket, exc) from None

    def empty_bucket(self, folder: Path, bucket: str) -> int:
        deleted = 0
        try:
            session, base = self.api.connect()
            for name, generation in self._generations(session, base, bucket):
                url = f"{base}/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}"
                params = {"generation": generation} if generation else {}
                response = self.api.call(
                    session, "DELETE", url, f"delete {name} from {bucket}", params=params
                )
                if response.status_code == 404:
                    continue  # gone meanwhile
                if response.status_code not in (200, 204):
                    raise OperationError(
                        f"cannot delete {name} from bucket {bucket} ({deleted} deleted so far): "
                        f"{self.api.error_message(response)}"
                    )
                deleted += 1
        except UsageError as exc:
            raise _failed(bucket, exc) from None
        return deleted
