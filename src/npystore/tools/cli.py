"""The ``npystore`` command: ``info``, ``cat``, ``refs`` and ``convert`` on any fsspec URL.

This module builds the argument parser and dispatches to the subcommands, each a thin layer
over the library: ``info`` (:mod:`npystore.tools.info`: the headers of each format), ``cat``
(:mod:`npystore.tools.cat`, over :func:`npystore.open`), ``refs`` (:func:`npystore.to_kerchunk`)
and ``convert`` (:func:`npystore.tools.convert.convert`); the text of arguments is parsed by
:mod:`npystore.tools.args`. Errors that npystore raises on
purpose print as one line naming the URL (``--traceback`` shows the whole traceback) and exit
with status 1; usage errors exit with 2, an interruption with 130.

>>> from npystore.tools.cli import parse_slice, parse_storage_options, split_member
>>> split_member("s3://bucket/run.npz:x")
('s3://bucket/run.npz', 'x')
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NoReturn, TextIO

import npystore
from npystore.errors import NpystoreError
from npystore.fetch import write_object
from npystore.tools.args import (
    CliError,
    byte_size,
    chunk_spec,
    depth,
    is_url,
    missing_parent,
    output_kind,
    parse_slice,
    parse_storage_options,
    positive_int,
    split_member,
)
from npystore.tools.cat import run_cat
from npystore.tools.info import info, print_info

__all__ = ["CliError", "build_parser", "info", "main", "parse_slice", "parse_storage_options",
           "run", "split_member"]  # fmt: skip

#: Exit status after an interruption (128 + SIGINT).
INTERRUPTED: Final = 130


def _info_cmd(args: argparse.Namespace, options: Mapping[str, Any] | None, out: TextIO) -> int:
    from npystore.tools.many import dataset_info, names_dataset, print_dataset_info  # noqa: PLC0415

    if names_dataset(args.url, options):  # a glob or a folder of .npy files
        facts = dataset_info(args.url, options)
        if args.json:
            print(json.dumps(facts, indent=2), file=out)
        else:
            print_dataset_info(facts, out)
        return 0
    facts = info(args.url, options, args.depth)
    if args.json:
        print(json.dumps(facts, indent=2), file=out)
    else:
        print_info(facts, out)
    return 0


def _refs_cmd(args: argparse.Namespace, options: Mapping[str, Any] | None, out: TextIO) -> int:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chunks = None if args.chunks is None else chunk_spec(args.chunks)
        if isinstance(chunks, tuple) and len(chunks) == 1:
            chunks = chunks[0]  # one length: every axis, every member (as an int in the API)
        try:
            limit = {} if args.max_inline is None else {"max_inline": args.max_inline}
            refs = npystore.to_kerchunk(
                args.url,
                storage_options=options,
                zarr_format=args.zarr_format,
                chunks=chunks,
                **limit,
            )
        except ValueError as exc:
            if isinstance(exc, NpystoreError):  # malformed input: reported as such
                raise
            raise CliError(f"--chunks: {exc}") from exc  # a chunk spec Zarr cannot hold
    _say_warnings(caught)
    text = json.dumps(refs, indent=None if args.output else 2)
    if args.output in (None, "-"):
        print(text, file=out)
    elif is_url(args.output):
        write_object(args.output, text.encode(), _out_options(args, options))
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    ranged = sum(isinstance(v, list) for v in refs["refs"].values())
    where = "stdout" if args.output in (None, "-") else args.output
    print(f"{len(refs['refs'])} references ({ranged} byte ranges of {args.url}) -> {where}",
          file=sys.stderr)  # fmt: skip
    return 0


def _out_options(args: argparse.Namespace, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Storage options of an output URL: ``--out-storage-option``, else the input's."""
    own = parse_storage_options(args.out_storage_option, args.out_storage_options_json)
    return dict(own or options or {})


def _say_warnings(caught: Sequence[warnings.WarningMessage]) -> None:
    """Library warnings as one short line each on stderr (their first sentence, once)."""
    seen: set[str] = set()
    for w in caught:
        text = str(w.message).split(". ")[0].rstrip(".")
        if text not in seen:
            seen.add(text)
            print(f"npystore: warning: {type(w.message).__name__}: {text}", file=sys.stderr)


def _convert_cmd(args: argparse.Namespace, options: Mapping[str, Any] | None, out: TextIO) -> int:
    try:
        kind = output_kind(args.out)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    parent = missing_parent(args.out)
    if parent is not None:
        raise CliError(
            f"{args.out}: the directory {parent!r} does not exist; create it first (convert, "
            "like numpy.save, does not create directories)"
        )
    from npystore.tools.many import convert_dataset, names_dataset  # noqa: PLC0415

    if names_dataset(args.url, options):  # a glob or a folder of .npy files: one array
        chunks = [c for c in args.chunks or () if "=" not in c]
        written, shape, nbytes = convert_dataset(
            args.url,
            args.out,
            storage_options=options,
            out_storage_options=_out_options(args, options) if is_url(args.out) else None,
            chunks=chunk_spec(chunks[-1]) if chunks else None,
            name=args.name,
        )
        print(f"{written}: one array of shape {shape}, {nbytes} bytes", file=out)
        return 0
    if kind in ("npy", "npz"):  # npystore's own writers
        from npystore.tools.export import export  # noqa: PLC0415

        if kind == "npz" and args.level is not None and not 1 <= args.level <= 9:
            raise CliError(f"--level {args.level}: an .npz output takes 1 (fastest) to 9")
        done = export(
            args.url,
            args.out,
            storage_options=options,
            out_storage_options=_out_options(args, options) if is_url(args.out) else None,
            name=args.name,
            compress=args.compressor != "none",
            level=args.level,
        )
        print(f"{done.out}: {len(done.arrays)} arrays, {done.nbytes} bytes", file=out)
        return 0
    from npystore.tools.convert import convert, format_size  # noqa: PLC0415

    default, per_array = None, {}
    for item in args.chunks or ():
        name, sep, spec = item.rpartition("=")
        if sep:
            per_array[name] = chunk_spec(spec)
        else:
            default = chunk_spec(spec)
    result = convert(
        args.url,
        args.out,
        storage_options=options,
        out_storage_options=_out_options(args, options) if is_url(args.out) else None,
        name=args.name,
        chunks=default,
        array_chunks=per_array,
        compressor=args.compressor,
        level=args.level,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        workers=args.workers,
        checkpoint_interval=args.checkpoint_interval,
        log=lambda message: print(message, file=sys.stderr),
    )
    print(
        f"{result.out}: {len(result.arrays)} arrays, {format_size(result.nbytes)}, "
        f"{result.chunks_total} chunks ({result.chunks_written} written now, "
        f"{result.chunks_done_before} before)"
        + (f", {len(result.skipped)} skipped" if result.skipped else ""),
        file=out,
    )
    return 0


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    sup = argparse.SUPPRESS
    common.add_argument(
        "-s",
        "--storage-option",
        action="append",
        default=sup,
        metavar="KEY=VALUE",
        help="fsspec storage option (repeatable; JSON values; a.b=... nests)",
    )
    common.add_argument(
        "--storage-options-json",
        default=sup,
        metavar="JSON",
        help="storage options as a JSON object, or @file.json",
    )
    common.add_argument("--traceback", action="store_true", default=sup,
                        help="show the full traceback on errors")  # fmt: skip
    return common


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``npystore`` (subcommands info, cat, refs, convert)."""
    common = _common()
    parser = argparse.ArgumentParser(
        prog="npystore", parents=[common],
        description="Inspect and convert .npy, .npz and MATLAB .mat files on any fsspec URL.",
    )  # fmt: skip
    parser.add_argument("--version", action="version", version=f"npystore {npystore.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("info", parents=[common], help="header facts, members or variables")
    p.add_argument("url", metavar="URL")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--depth",
        type=depth,
        default=None,
        help="levels of struct/cell contents listed for .mat (-1: all; default: what the "
        "headers hold: all for v7.3, none for v5/v4, whose contents are data)",
    )
    p.set_defaults(run=_info_cmd)

    p = sub.add_parser("cat", parents=[common], help="print values (URL or URL:member)")
    p.add_argument("url", metavar="URL[:MEMBER]")
    p.add_argument("--member", "-m", help="member (.npz) or variable path (.mat: s.field, c/0)")
    p.add_argument(
        "--slice", metavar="INDEX", help='numpy-style index, e.g. "10:20,3", "::2", "...,0"'
    )
    p.add_argument("--full", action="store_true", help="print every value (no summary)")
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="read object arrays (pickles: loading runs code from the file; trusted files only)",
    )
    p.set_defaults(run=run_cat)

    p = sub.add_parser("refs", parents=[common], help="write kerchunk references (JSON)")
    p.add_argument("url", metavar="URL")
    p.add_argument(
        "-o", "--output", metavar="FILE", help="output file or fsspec URL (default: stdout)"
    )
    p.add_argument(
        "--out-storage-option",
        action="append",
        metavar="KEY=VALUE",
        help="storage option for the output URL only (default: those of --storage-option)",
    )
    p.add_argument("--out-storage-options-json", metavar="JSON")
    p.add_argument(
        "--zarr-format",
        type=int,
        choices=(2, 3),
        default=2,
        help="2: kerchunk's Zarr v2 form (default, for MultiZarrToZarr and "
        'engine="kerchunk"); 3: the Zarr v3 documents of open_store',
    )
    p.add_argument(
        "--chunks",
        metavar="SPEC",
        help="chunks as in open_npy: lengths per axis (1000,-1), one length for every axis, "
        "auto, or a size (16MiB) (default: chosen so that byte ranges carry the data)",
    )
    p.add_argument(
        "--max-inline",
        type=byte_size,
        metavar="SIZE",
        help="most bytes of values inlined into the references in all (default 16MiB)",
    )
    p.set_defaults(run=_refs_cmd)

    p = sub.add_parser(
        "convert", parents=[common], help="write a Zarr v3 store, or an .npy/.npz file"
    )
    p.add_argument("url", metavar="URL")
    p.add_argument(
        "out",
        metavar="OUT",
        help="output Zarr group (a directory or fsspec URL ending in .zarr or without an "
        "extension), or a file ending in .npy or .npz (written by npystore.save / "
        "savez_compressed; --compressor none: savez); its directory must exist",
    )
    p.add_argument("--name", help="array name for an .npy source (default: the file name)")
    p.add_argument(
        "--chunks",
        action="append",
        metavar="[ARRAY=]SPEC",
        help="Zarr chunks: leading-axis lengths (1000,-1), or a size (16MiB); "
        "ARRAY= for one array (repeatable)",
    )
    p.add_argument("--compressor", choices=("zstd", "blosc", "gzip", "none"), default="zstd")
    p.add_argument(
        "--level",
        type=int,
        help="compression level (zstd 3, blosc 5, gzip 5; an .npz output: 1-9, default 6)",
    )
    p.add_argument(
        "--workers", type=positive_int, help="writer threads (default: CPUs, at least 4)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace what OUT holds")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--checkpoint-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="most seconds between progress-manifest updates (default 1)",
    )
    p.add_argument(
        "--out-storage-option",
        action="append",
        metavar="KEY=VALUE",
        help="storage option for OUT only (default: those of --storage-option)",
    )
    p.add_argument("--out-storage-options-json", metavar="JSON")
    p.set_defaults(run=_convert_cmd)  # fmt: skip
    return parser


def _message(exc: BaseException, url: str) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, CliError):
        return text
    if isinstance(exc, FileNotFoundError):
        other = exc.filename and os.path.basename(str(exc.filename)) != os.path.basename(url)
        text = f"{exc.filename}: no such file" if other else f"{url}: no such file or object"
    elif isinstance(exc, KeyError) and exc.args:
        text = str(exc.args[0])
    return text if url and url in text else f"{url}: {text}" if url else text


def _join_slice(argv: list[str]) -> list[str]:
    """``--slice -5:`` as ``--slice=-5:`` (argparse takes ``-5:`` for an option)."""
    out: list[str] = []
    items = iter(argv)
    for item in items:
        if item == "--slice":
            value = next(items, None)
            out.append(item if value is None else f"--slice={value}")
        else:
            out.append(item)
    return out


def _usage(parser: argparse.ArgumentParser, message: str) -> int:
    parser.print_usage(sys.stderr)
    print(f"npystore: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``npystore`` with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments after the program name.

    Returns
    -------
    int
        0 on success, 1 on errors, 2 on usage errors, 130 when interrupted.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(_join_slice(sys.argv[1:] if argv is None else list(argv)))
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    if args.command == "cat":
        url = args.url
        args.url, member = split_member(url)
        if args.member is not None and member is not None:
            return _usage(parser, f"cat: member given twice: in {url!r} and --member")
        args.member = args.member if args.member is not None else member
        try:
            args.index = None if args.slice is None else parse_slice(args.slice)
        except ValueError as exc:
            return _usage(parser, f"cat: --slice: {exc}")
    show_traceback = getattr(args, "traceback", False)
    run: Callable[[argparse.Namespace, Mapping[str, Any] | None, TextIO], int] = args.run
    try:
        options = parse_storage_options(
            getattr(args, "storage_option", None), getattr(args, "storage_options_json", None)
        )
        return run(args, options or None, sys.stdout)
    except KeyboardInterrupt:
        print(
            "npystore: interrupted"
            + ("; run the same command again to resume" if args.command == "convert" else ""),
            file=sys.stderr,
        )
        return INTERRUPTED
    except BrokenPipeError:  # e.g. `npystore cat ... | head`
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (NpystoreError, CliError, OSError, KeyError) as exc:
        if show_traceback:
            traceback.print_exc()
        print(f"npystore: error: {_message(exc, args.url)}", file=sys.stderr)
        return 1


def run() -> NoReturn:
    """The console script: :func:`main` on ``sys.argv``, then exit with its status.

    After an interruption it exits at once, without waiting for worker threads still in a
    range read or a chunk write: what ``convert`` finished is already in its manifest (a
    chunk cut mid-write is never recorded, and a rerun removes its leftovers), so Ctrl-C
    ends the command within a fraction of a second instead of after the reads in flight.
    """
    code = main()
    if code == INTERRUPTED:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
    sys.exit(code)
