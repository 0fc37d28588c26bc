"""Image migration between clusters' OCI registries with skopeo, behind the migrator port.

`copy_image` does one copy: it reads the source manifest (`skopeo inspect --raw`, whose sha256 is the
digest), skips when the destination already serves that digest, else runs `skopeo copy --all
--preserve-digests` (so the destination serves the very same digest) and checks the destination
afterwards. A failed attempt (registry down, connection cut mid-copy, digest not there afterwards) is
retried after `backoff_s`, doubling each time, up to `retries` more times; then `CopyFailed` says why.

`SkopeoMigrator` runs one such copy per job in a background thread, so `start` returns at once and `poll`
reports finished copies. The job's image moves from the source cluster's `registry` to the destination's
under the same repository path and tag; the manifest to submit is the destination reference pinned by
digest (`MigrationDone.image`). Bytes are those of the manifest, config and layers (a blob the
destination already holds is counted, as skopeo does not say which it skipped); seconds are the wall time
of the successful attempt. Measured copies teach the transfer-time model the WAN bandwidth.
"""

from __future__ import annotations

import hashlib
import json
import queue
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from config.settings import ClustersConfig
from cpn.adapters.migrator import MigrationDone
from cpn.jobs import JobSpec
from cpn.transfer import TransferTimes

SKOPEO = "skopeo"
"""The skopeo binary (Debian package `skopeo`)."""

INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)


@dataclass(frozen=True)
class ImageRef:
    """An image reference split into registry host, repository path, tag and digest."""

    registry: str
    """host[:port]; empty when the reference names none."""
    repository: str
    tag: str = ""
    digest: str = ""

    @classmethod
    def parse(cls, ref: str) -> ImageRef:
        """`[host[:port]/]path[:tag][@sha256:...]`; the first part is a host if it has a dot or a colon."""
        ref = ref.removeprefix("docker://")
        name, _, digest = ref.partition("@")
        slash = name.rfind("/")
        colon = name.rfind(":")
        tag = ""
        if colon > slash:
            name, tag = name[:colon], name[colon + 1 :]
        first, _, rest = name.partition("/")
        if rest and ("." in first or ":" in first or first == "localhost"):
            registry, repository = first, rest
        else:
            registry, repository = "", name
        if not repository:
            raise ValueError(f"image reference {ref!r} names no repository")
        return cls(registry, repository, tag, digest)

    def moved_to(self, registry: str) -> ImageRef:
        """The same repository and tag in another registry (tag `sha256-<hex>` for a digest-only image)."""
        tag = self.tag or (self.digest.replace(":", "-") if self.digest else "latest")
        return ImageRef(registry, self.repository, tag)

    def pinned(self, digest: str) -> str:
        """`registry/repository@digest`."""
        return f"{self._name()}@{digest}"

    def _name(self) -> str:
        return f"{self.registry}/{self.repository}" if self.registry else self.repository

    def __str__(self) -> str:
        text = self._name()
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


@dataclass(frozen=True)
class CopyResult:
    """One image copy, as `cpn migrate image --json` writes it."""

    source: str
    destination: str
    """The destination reference pinned by digest."""
    digest: str
    bytes: int
    seconds: float
    skipped: bool
    attempts: int

    def to_json(self) -> dict:
        """The JSON object of the copy."""
        return asdict(self)


class CopyFailed(RuntimeError):
    """Every attempt of a copy failed; the message says how often and the last reason."""

    def __init__(self, message: str, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


class _AttemptFailed(Exception):
    pass


def _tls(insecure: bool) -> str:
    return f"={str(not insecure).lower()}"


def _run(args: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run([SKOPEO, *args], capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise _AttemptFailed(f"skopeo {args[0]} timed out after {timeout_s:g} s") from None
    except FileNotFoundError:
        raise RuntimeError(f"{SKOPEO} not found: install it (Debian: apt-get install skopeo)") from None
    return proc


def _message(line: str) -> str:
    """skopeo's log line without its time and level: `time="..." level=fatal msg="X"` -> X."""
    _, found, msg = line.partition(' msg="')
    return msg.removesuffix('"').replace('\\"', '"') if found else line.strip()


def _last_line(stderr: bytes) -> str:
    lines = [line for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    return _message(lines[-1]) if lines else "no message"


def inspect_raw(ref: str, insecure: bool, timeout_s: float = 60) -> tuple[bytes | None, str]:
    """The raw manifest `ref` serves, or None and skopeo's reason (absent, unreachable)."""
    proc = _run(["inspect", "--raw", f"--tls-verify{_tls(insecure)}", f"docker://{ref}"], timeout_s)
    if proc.returncode != 0:
        return None, _last_line(proc.stderr)
    return proc.stdout, ""


def digest_of(raw: bytes) -> str:
    """The digest of a manifest: sha256 of its bytes as served."""
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def manifest_bytes(raw: bytes, read_child: Callable[[str], bytes | None]) -> int:
    """Bytes of an image: its manifest, config and layers; for an index, those of every child manifest."""
    manifest = json.loads(raw)
    if manifest.get("mediaType") in INDEX_TYPES or "manifests" in manifest:
        total = len(raw)
        for child in manifest.get("manifests", []):
            child_raw = read_child(child["digest"])
            total += manifest_bytes(child_raw, read_child) if child_raw is not None else child.get("size", 0)
        return total
    blobs = [manifest.get("config", {}), *manifest.get("layers", [])]
    return len(raw) + sum(int(b.get("size", 0)) for b in blobs)


def copy_image(
    source: str,
    destination: str,
    *,
    src_insecure: bool = False,
    dest_insecure: bool = False,
    retries: int = 3,
    backoff_s: float = 1.0,
    timeout_s: float = 1800,
    progress: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> CopyResult:
    """Copy image `source` to `destination` (both `host[:port]/path[:tag]`); skip when already there.

    Raises CopyFailed after 1 + `retries` failed attempts, waiting `backoff_s`, 2x, 4x... between them.
    `progress` gets skopeo's output lines as they come ("Copying blob sha256:...").
    """
    src, dst = ImageRef.parse(source), ImageRef.parse(destination)
    attempts, reason = 0, ""
    for attempt in range(retries + 1):
        if attempt:
            if progress:
                progress(
                    f"attempt {attempt} failed ({reason}); retrying in {backoff_s * 2 ** (attempt - 1):g} s"
                )
            sleep(backoff_s * 2 ** (attempt - 1))
        attempts += 1
        try:
            return _attempt(src, dst, src_insecure, dest_insecure, timeout_s, progress, attempts)
        except _AttemptFailed as exc:
            reason = str(exc)
    raise CopyFailed(f"copy {src} -> {dst} failed after {attempts} attempts: {reason}", attempts)


def _attempt(
    src: ImageRef,
    dst: ImageRef,
    src_insecure: bool,
    dest_insecure: bool,
    timeout_s: float,
    progress: Callable[[str], None] | None,
    attempts: int,
) -> CopyResult:
    raw, why = inspect_raw(str(src), src_insecure, timeout_s)
    if raw is None:
        raise _AttemptFailed(f"cannot read {src}: {why}")
    digest = digest_of(raw)
    if src.digest and src.digest != digest:
        raise _AttemptFailed(f"{src} serves {digest}, not the digest it names")
    there, _ = inspect_raw(str(dst), dest_insecure, timeout_s)
    if there is not None and digest_of(there) == digest:
        return CopyResult(str(src), dst.pinned(digest), digest, 0, 0.0, True, attempts)
    origin = ImageRef(src.registry, src.repository)
    size = manifest_bytes(raw, lambda child: inspect_raw(origin.pinned(child), src_insecure, timeout_s)[0])
    with tempfile.TemporaryDirectory(prefix="cpn-copy-") as tmp:
        digest_file = Path(tmp) / "digest"
        args = [
            SKOPEO,
            "copy",
            "--all",
            "--preserve-digests",
            "--retry-times=0",
            f"--src-tls-verify{_tls(src_insecure)}",
            f"--dest-tls-verify{_tls(dest_insecure)}",
            f"--digestfile={digest_file}",
            f"docker://{origin.pinned(digest)}",
            f"docker://{dst}",
        ]
        started = time.monotonic()
        output = _stream(args, timeout_s, progress)
        seconds = time.monotonic() - started
        if output[0] != 0:
            raise _AttemptFailed(f"skopeo copy exited {output[0]}: {output[1]}")
        copied = digest_file.read_text().strip() if digest_file.exists() else ""
    if copied != digest:
        raise _AttemptFailed(f"the destination got {copied or 'no digest'}, expected {digest}")
    there, why = inspect_raw(dst.pinned(digest), dest_insecure, timeout_s)
    if there is None or digest_of(there) != digest:
        raise _AttemptFailed(f"{dst.pinned(digest)} is not readable after the copy: {why or 'other digest'}")
    return CopyResult(str(src), dst.pinned(digest), digest, size, seconds, False, attempts)


def _stream(args: list[str], timeout_s: float, progress: Callable[[str], None] | None) -> tuple[int, str]:
    """Run skopeo, handing each output line to `progress`; (exit status, last line)."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    last = "no output"
    try:
        assert proc.stdout is not None
        for raw_line in proc.stdout:
            line = raw_line.decode(errors="replace").strip()
            if line:
                last = line
                if progress:
                    progress(line)
        code = proc.wait()
    finally:
        timer.cancel()
    if code < 0:
        return code, f"killed after {timeout_s:g} s" if code == -9 else _message(last)
    return code, _message(last)


class SkopeoMigrator:
    """Copies jobs' images to the destination cluster's registry in background threads (the port)."""

    def __init__(
        self,
        clusters: ClustersConfig,
        transfers: TransferTimes | None = None,
        clock: Callable[[], float] = time.time,
        retries: int = 3,
        backoff_s: float = 1.0,
    ) -> None:
        """`transfers`, if given, learns the WAN bandwidth from every measured copy (in `poll`)."""
        self.clusters = clusters
        self.transfers = transfers
        self.clock = clock
        self.retries = retries
        self.backoff_s = backoff_s
        self._done: queue.Queue[tuple[MigrationDone, str]] = queue.Queue()
        self._threads: dict[str, threading.Thread] = {}
        self._progress: dict[str, str] = {}
        self.results: dict[str, CopyResult] = {}
        """job id -> its last successful copy."""

    def start(self, job: JobSpec, src: str, dst: str, started_at: float | None = None) -> None:
        """Begin copying `job.image` from `src`'s registry to `dst`'s; returns at once. A copy another process
        began (`started_at`) is made again: skopeo moves only the blobs the destination lacks.

        A job with nothing to copy, or a destination with no registry, finishes at once (ok or failed).
        """
        if not job.image:
            self._done.put((MigrationDone(job.job_id, dst, self.clock(), ok=True), src))
            return
        source, target = self.clusters.cluster(src), self.clusters.cluster(dst)
        if target.registry is None:
            reason = f"cluster {dst} has no registry to copy {job.image} to; set `registry` in its config"
            self._done.put((MigrationDone(job.job_id, dst, self.clock(), ok=False, reason=reason), src))
            return
        image = ImageRef.parse(job.image)
        if source.registry is not None:
            image = ImageRef(source.registry, image.repository, image.tag, image.digest)
        thread = threading.Thread(
            target=self._copy,
            args=(job.job_id, src, dst, image, source.registry_insecure, target),
            name=f"migrate-{job.job_id}",
            daemon=True,
        )
        self._threads[job.job_id] = thread
        self._progress[job.job_id] = "starting"
        thread.start()

    def _copy(self, job_id, src, dst, image, src_insecure, target) -> None:
        try:
            result = copy_image(
                str(image),
                str(image.moved_to(target.registry)),
                src_insecure=src_insecure,
                dest_insecure=target.registry_insecure,
                retries=self.retries,
                backoff_s=self.backoff_s,
                progress=lambda line: self._progress.__setitem__(job_id, line),
            )
        except (CopyFailed, RuntimeError, ValueError) as exc:
            self._done.put((MigrationDone(job_id, dst, self.clock(), ok=False, reason=str(exc)), src))
            return
        self.results[job_id] = result
        done = MigrationDone(
            job_id, dst, self.clock(), image=result.destination, bytes=result.bytes, seconds=result.seconds
        )
        self._done.put((done, src))

    def progress(self, job_id: str) -> str:
        """The last thing a job's copy said (a skopeo line, or a retry), empty when none is known."""
        return self._progress.get(job_id, "")

    def busy(self) -> bool:
        """Whether some copy is still under way."""
        return any(t.is_alive() for t in self._threads.values())

    def poll(self) -> list[MigrationDone]:
        """Copies finished since the last call, in the order they finished; measured ones teach bandwidth."""
        done = []
        while True:
            try:
                item, src = self._done.get_nowait()
            except queue.Empty:
                break
            self._threads.pop(item.job_id, None)
            if self.transfers is not None and item.ok and item.bytes and item.seconds:
                self.transfers.observe(src, item.cluster, item.bytes, item.seconds)
            done.append(item)
        return done
