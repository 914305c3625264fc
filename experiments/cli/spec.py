"""``kvfabric spec schema`` (the spec's JSON Schema, for editors), ``kvfabric spec
keys`` (every key with its type, default and meaning) and ``kvfabric spec types`` (the
typed run configuration's source), from the declarations the validator uses (no root)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from experiments.cli.common import EXIT_OK


def add_parsers(sub: Any) -> None:
    s = sub.add_parser("spec", help="the spec language: JSON Schema and key reference")
    ssub = s.add_subparsers(dest="spec_command", required=True)
    sch = ssub.add_parser("schema", help="the spec's JSON Schema (VS Code's YAML extension)")
    sch.add_argument("--out", metavar="FILE", help="write it here instead of stdout")
    keys = ssub.add_parser("keys", help="every key: what it takes, its default, what it means")
    keys.add_argument("--out", metavar="FILE", help="write the Markdown table here")
    types = ssub.add_parser("types", help="the typed run configuration's Python source")
    types.add_argument("--out", metavar="FILE", help="write the Python module here")
    s.set_defaults(handler=cmd_spec)


def cmd_spec(args: argparse.Namespace) -> int:
    from experiments.spec.export import keys_markdown, schema_text
    from experiments.spec.typegen import config_source

    makers = {"schema": schema_text, "keys": keys_markdown, "types": config_source}
    text = makers[args.spec_command]()
    if args.out:
        Path(args.out).write_text(text)
        print(args.out)
    else:
        print(text, end="")
    return EXIT_OK
