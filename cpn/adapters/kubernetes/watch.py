"""A watch on one collection of cpn's objects that resumes where it stopped and relists when it must.

The loop lists the collection (by a label selector, or all of it) once, hands the items to `on_list`,
and watches from the list's resourceVersion. Every event's resourceVersion (bookmarks included) is
remembered, so a watch that ends (its timeout, a dropped connection, a server error) resumes from there
without missing or repeating anything. When the server answers 410 Gone (the version was compacted
away), the loop lists again and carries on from the new list: `on_list` gets the whole current state,
so changes made while the watch was blind are still seen.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from .api import NETWORK_ERRORS, Api, ApiError

log = logging.getLogger(__name__)

GONE = 410


class CollectionWatch:
    """Keeps `on_list`/`on_event` fed with one collection's state, on a daemon thread."""

    def __init__(
        self,
        name: str,
        api: Api,
        list_fn: Callable[..., Any],
        selector: str | None,
        on_list: Callable[[str, list[dict]], None],
        on_event: Callable[[str, str, dict], None],
        timeout_s: int = 60,
    ) -> None:
        self.name = name
        self.api = api
        self.list_fn = list_fn
        self.selector = selector
        """Label selector of the objects watched; None = every object of the collection."""
        self.on_list = on_list
        self.on_event = on_event
        self.timeout_s = timeout_s
        self.resource_version: str | None = None
        """Where the next watch starts; None = list first."""
        self.lists = 0
        """Lists done: the first one and every relist (after 410 Gone)."""
        self.missing = False
        """The server does not serve this collection (e.g. no Volcano CRD)."""
        self._stop = threading.Event()
        self._resp: Any = None
        self._thread: threading.Thread | None = None

    def relist(self) -> None:
        """List the collection now and hand the whole of it to `on_list`."""
        try:
            body = self.api.call(self.list_fn, **self._selecting())
        except ApiError as exc:
            if exc.status == 404:
                self.missing = True
                return
            raise
        self.lists += 1
        self.resource_version = (body.get("metadata") or {}).get("resourceVersion")
        self.on_list(self.name, body.get("items") or [])

    def _selecting(self) -> dict[str, str]:
        return {} if self.selector is None else {"label_selector": self.selector}

    def start(self) -> None:
        """Run the watch loop on a daemon thread (once)."""
        if self._thread is None and not self.missing:
            self._thread = threading.Thread(target=self._run, name=f"watch-{self.name}", daemon=True)
            self._thread.start()

    def stop(self, wait: bool = True) -> None:
        """End the loop: an open stream is closed; with `wait`, until the thread has ended."""
        self._stop.set()
        resp = self._resp
        if resp is not None:
            # Shut the socket down so that the read blocked in the watch thread returns now.
            sock = getattr(getattr(resp, "connection", None), "sock", None)
            try:
                if sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)
                resp.close()
            except OSError:
                pass
        if wait and self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 5)

    def _run(self) -> None:
        backoff = self.api.retry.base_s
        while not self._stop.is_set() and not self.missing:
            try:
                if self.resource_version is None:
                    self.relist()
                    continue
                self._watch_once()
                backoff = self.api.retry.base_s
            except ApiException as exc:
                if exc.status == GONE:
                    self.resource_version = None
                    continue
                log.warning("watch %s: HTTP %s, retrying in %.1f s", self.name, exc.status, backoff)
            except (ApiError, *NETWORK_ERRORS, ValueError, AttributeError) as exc:
                # AttributeError: urllib3 reading a stream `stop` closed under it.
                if self._stop.is_set():
                    return
                log.warning("watch %s: %s, retrying in %.1f s", self.name, exc, backoff)
            self._stop.wait(backoff)
            backoff = min(backoff * 2, self.api.retry.max_s)

    def _watch_once(self) -> None:
        resp = self.list_fn(
            **self._selecting(),
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.timeout_s,
            _preload_content=False,
            _request_timeout=(self.api.retry.timeout_s, self.timeout_s + 10),
        )
        self._resp = resp
        try:
            for line in iter_resp_lines(resp):
                if self._stop.is_set():
                    return
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if obj.get("code") == GONE:
                        self.resource_version = None
                        return
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if event.get("type") != "BOOKMARK":
                    self.on_event(self.name, event["type"], obj)
                if rv:
                    self.resource_version = rv
        finally:
            self._resp = None
            resp.release_conn()
