"""The output store and the progress manifest in it: what a resumed conversion finds there.

The manifest (:data:`MANIFEST_KEY`, at the root of the store) records the source's identity
(URL, size, ETag/mtime), the options, the chunks written so far and the CRC-32 bookkeeping of
stored ``.npz`` members; :class:`Manifest` rewrites it atomically. :func:`open_manifest`
starts a new one in an empty store, or checks that the one found is of the same conversion and
collects the chunks it records or the store holds (chunk objects are written atomically, by
zarr's local store and by object stores), removing what a killed run left half-written.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

import numpy as np
import zarr
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import npystore
from npystore.errors import FormatError
from npystore.fetch.remote import BUDGET_OPTION
from npystore.read.crccheck import CrcLedger
from npystore.read.layout import RawExtent
from npystore.tools.convert.plan import ArrayPlan, ConvertError, Plan

__all__ = ["MANIFEST_KEY", "Manifest", "open_manifest", "open_store"]

#: The progress manifest, a key at the root of the output store.
MANIFEST_KEY: Final = ".npystore-convert.json"
_MANIFEST_VERSION: Final = 1
#: What zarr's LocalStore leaves behind when a process dies while it writes a chunk (it
#: writes ``<key>.<uuid hex>.partial`` and renames it into place).
_STALE_PARTIAL: Final = re.compile(r"[^/]+\.[0-9a-f]{32}\.partial")


def open_store(out: str, storage_options: Mapping[str, Any] | None) -> Store:
    """The Zarr store at ``out``: a local directory, or an fsspec URL with its options."""
    if "://" not in out or out.startswith("file://"):
        return zarr.storage.LocalStore(out.removeprefix("file://"))
    # npystore's own read option is not the output filesystem's (the command line may pass
    # the input's options for the output too)
    options = {k: v for k, v in (storage_options or {}).items() if k != BUDGET_OPTION}
    return zarr.storage.FsspecStore.from_url(out, storage_options=options)


async def _collect(items: AsyncIterator[str]) -> list[str]:
    return [item async for item in items]


def _store_keys(store: Store) -> set[str]:
    return set(sync(_collect(store.list_prefix(""))))


def _get_json(store: Store, key: str, out: str) -> dict[str, Any] | None:
    buf = sync(store.get(key, prototype=default_buffer_prototype()))
    if buf is None:
        return None
    try:
        doc = json.loads(buf.to_bytes())
    except ValueError as exc:
        raise ConvertError(f"{out}: {key} is not valid JSON ({exc}); pass overwrite") from exc
    if not isinstance(doc, dict):
        raise ConvertError(f"{out}: {key} holds {type(doc).__name__}, expected an object")
    return doc


def _put_json(store: Store, key: str, doc: Mapping[str, Any]) -> None:
    data = json.dumps(doc, separators=(",", ":")).encode()
    sync(store.set(key, default_buffer_prototype().buffer.from_bytes(data)))


def _ranges(indices: set[int]) -> list[list[int]]:
    """Sorted indices as ``[start, stop)`` runs."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return runs


def _from_ranges(runs: Any, total: int, where: str) -> set[int]:
    out: set[int] = set()
    if not isinstance(runs, list):
        raise ConvertError(f"{where}: done chunks are {type(runs).__name__}, expected a list")
    for run in runs:
        if not (isinstance(run, list) and len(run) == 2 and 0 <= run[0] <= run[1] <= total):
            raise ConvertError(f"{where}: done-chunk run {run!r} is not within 0..{total}")
        out.update(range(run[0], run[1]))
    return out


def _stored_chunks(keys: set[str], plans: list[ArrayPlan]) -> dict[str, set[int]]:
    """Linear indices of the chunks present in the store, per array."""
    by_path = {p.path: p for p in plans}
    found: dict[str, set[int]] = {p.path: set() for p in plans}
    for key in keys:
        parts = key.split("/")
        for i, part in enumerate(parts):
            if part != "c":
                continue
            plan = by_path.get("/".join(parts[:i]))
            index = parts[i + 1 :]
            if plan is None or len(index) != len(plan.grid) or not all(x.isdigit() for x in index):
                continue
            idx = tuple(int(x) for x in index)
            if all(j < n for j, n in zip(idx, plan.grid, strict=True)):
                found[plan.path].add(int(np.ravel_multi_index(idx, plan.grid)) if idx else 0)
    return found


class Manifest:
    """The progress record in the store, rewritten atomically (one object/file per write).

    Besides the chunks written it keeps the CRC-32 bookkeeping of stored ``.npz`` members
    (:meth:`~npystore.read.crccheck.CrcLedger.export`: the byte ranges read so far and their
    CRC-32s), so a member read partly by one run and partly by a resumed one is still
    checked, and the error of a run that found the source corrupt (``failed``), so a
    resumed run does not write the rest of a corrupt member.
    """

    def __init__(
        self,
        store: Store,
        doc: dict[str, Any],
        interval: float,
        ledgers: Mapping[str, CrcLedger] | None = None,
    ) -> None:
        self.store = store
        self.doc = doc
        self.interval = interval
        self.done: dict[str, set[int]] = {}
        self.ledgers = dict(ledgers or {})
        self._lock = threading.Lock()
        self._last = time.monotonic()

    def mark(self, path: str, index: int) -> None:
        """Record chunk ``index`` of array ``path`` as written (saved every ``interval`` s)."""
        with self._lock:
            self.done[path].add(index)
            if time.monotonic() - self._last >= self.interval:
                self._write()

    def flush(self, *, complete: bool = False, failed: str | None = None) -> None:
        """Save the manifest now, marked complete or not, with the error that ``failed`` it."""
        with self._lock:
            self.doc["complete"] = complete
            if failed is not None:
                self.doc["failed"] = failed
            self._write()

    def _write(self) -> None:
        self.doc["done"] = {path: _ranges(done) for path, done in self.done.items()}
        crc = {path: ledger.export() for path, ledger in self.ledgers.items()}
        self.doc["crc"] = {path: state for path, state in crc.items() if state is not None}
        _put_json(self.store, MANIFEST_KEY, self.doc)
        self._last = time.monotonic()


def _ledgers(plans: list[ArrayPlan]) -> dict[str, CrcLedger]:
    """The CRC-32 ledgers of the arrays read from stored ``.npz`` members."""
    out: dict[str, CrcLedger] = {}
    for a in plans:
        storage = a.array.layout.storage
        if isinstance(storage, RawExtent) and storage.crc is not None:
            out[a.path] = storage.crc
    return out


def _check_resume(found: dict[str, Any], expected: dict[str, Any], out: str) -> None:
    if found.get("version") != _MANIFEST_VERSION:
        raise ConvertError(
            f"{out}: {MANIFEST_KEY} has version {found.get('version')!r}, expected "
            f"{_MANIFEST_VERSION}; pass overwrite to start again"
        )
    diffs = [k for k in ("source", "options", "arrays") if found.get(k) != expected[k]]
    if not diffs:
        return
    detail = []
    if "source" in diffs:
        detail.append(f"the source was {found.get('source')}, now {expected['source']}")
    if "options" in diffs:
        detail.append(f"options were {found.get('options')}, now {expected['options']}")
    if "arrays" in diffs:
        old, new = found.get("arrays") or {}, expected["arrays"]
        changed = sorted(p for p in set(old) | set(new) if old.get(p) != new.get(p))
        detail.append(f"arrays differ: {changed[:5]}{' ...' if len(changed) > 5 else ''}")
    state = "a finished" if found.get("complete") else "an unfinished"
    raise ConvertError(
        f"{out} holds {state} conversion that differs from this one of "
        f"{expected['source']['url']} (" + "; ".join(detail) + "); pass overwrite "
        "(--overwrite) to replace it"
    )


def open_manifest(
    store: Store,
    out: str,
    plan: Plan,
    options: Mapping[str, Any],
    *,
    overwrite: bool,
    interval: float,
) -> tuple[Manifest, set[str]]:
    """The manifest of converting ``plan`` into ``store``: a new one, or the one a run left.

    Parameters
    ----------
    store : zarr.abc.store.Store
        The output store (named ``out`` in messages).
    out : str
        The output as the user gave it.
    plan : Plan
        What the conversion writes.
    options : mapping
        The options a resumed run must share (compressor and level).
    overwrite : bool
        Clear the store first.
    interval : float
        Most seconds between two saves of the manifest.

    Returns
    -------
    manifest : Manifest
        Its ``done`` holds, per array, the chunks recorded or present in the store, its
        ``doc`` whether the conversion is ``complete``; the CRC-32 ledgers of stored
        ``.npz`` members are restored from it.
    keys : set of str
        The keys the store holds (none when the conversion starts now).

    Raises
    ------
    ConvertError
        ``out`` holds something else: no manifest, or one of another conversion.
    FormatError
        An earlier run found the source corrupt.
    """
    expected = {
        "version": _MANIFEST_VERSION,
        "npystore": npystore.__version__,
        "source": plan.identity,
        "format": plan.format,
        "options": dict(options),
        "arrays": {a.path: a.describe() for a in plan.arrays},
    }
    if overwrite and not sync(store.is_empty("")):
        sync(store.clear())
    found = _get_json(store, MANIFEST_KEY, out)
    keys: set[str] = set()
    if found is None:
        if not sync(store.is_empty("")):
            raise ConvertError(
                f"{out} is not empty and holds no {MANIFEST_KEY} (not an npystore "
                "conversion); pass overwrite (--overwrite) to replace its content"
            )
        found = {**expected, "done": {}, "complete": False}
        _put_json(store, MANIFEST_KEY, found)
    else:
        _check_resume(found, expected, out)
        if found.get("failed"):
            raise FormatError(
                f"{found['failed']} (found by an earlier run of this conversion, recorded in "
                f"{out}/{MANIFEST_KEY}; the source is unchanged; pass overwrite "
                "(--overwrite) to read it again)"
            )
        keys = _store_keys(store)
        stale = {k for k in keys if _STALE_PARTIAL.fullmatch(k.rsplit("/", 1)[-1])}
        for key in stale:  # half-written chunks of a killed run: never read, now removed
            sync(store.delete(key))
        keys -= stale
    ledgers = _ledgers(plan.arrays)
    saved_crc = found.get("crc") or {}
    for path, ledger in ledgers.items():
        if path in saved_crc:
            ledger.restore(saved_crc[path], where=f"{out}/{MANIFEST_KEY} ({path})")
    manifest = Manifest(store, found, interval, ledgers)
    recorded = found.get("done") or {}
    stored = _stored_chunks(keys, plan.arrays)
    for a in plan.arrays:
        where = f"{out}/{MANIFEST_KEY} ({a.path})"
        manifest.done[a.path] = _from_ranges(recorded.get(a.path, []), a.nchunks, where)
        manifest.done[a.path] |= stored[a.path]
    return manifest, keys
