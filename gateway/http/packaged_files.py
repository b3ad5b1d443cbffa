"""Files shipped inside the ``gateway`` package and served as they are (the console's, the
schema page's): read once, each answered with its media type and the caller's headers."""

from __future__ import annotations

import importlib.resources
from collections.abc import Mapping

from litestar import Response

from gateway.errors import NotFound


class PackagedFiles:
    """The files of one folder of the ``gateway`` package whose suffix has a media type."""

    def __init__(
        self, folder: str, media_types: Mapping[str, str], headers: Mapping[str, str], what: str
    ) -> None:
        self.folder = folder
        self.media_types = dict(media_types)
        self.headers = dict(headers)
        self.what = what  #: how a 404 names them ("console file")
        self._files: dict[str, bytes] | None = None

    def files(self) -> dict[str, bytes]:
        """Return the files by name, read from the package on first use."""
        if self._files is None:
            root = importlib.resources.files("gateway") / self.folder
            self._files = {
                entry.name: entry.read_bytes()
                for entry in root.iterdir()
                if entry.is_file() and suffix(entry.name) in self.media_types
            }
        return self._files

    def response(self, name: str) -> Response[bytes]:
        """Answer with file ``name``, or 404."""
        body = self.files().get(name)
        if body is None:
            raise NotFound(f"No {self.what} {name[:100]!r}.")
        return Response(
            content=body, media_type=self.media_types[suffix(name)], headers=dict(self.headers)
        )


def suffix(name: str) -> str:
    """The name's last dot and what follows it (``""`` without a dot)."""
    return name[name.rfind(".") :] if "." in name else ""
