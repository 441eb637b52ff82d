"""docs/configuration.md, generated from the settings class (models/settings.py): each setting's environment
variables, type, default and what the class says of it (its description, its own comments, and the comment
above the lines it heads). `make docs-config` writes the page; `--check` says whether the page is up to date
(tests/test_docs.py fails when it is not)."""

from __future__ import annotations

import argparse
import ast
import inspect
import io
import json
import sys
import tokenize
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import AliasChoices, AliasPath, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from models.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "configuration.md"

INTRO = """\
# Configuration

<!-- Generated from models/settings.py by `make docs-config` (scripts/settings_page.py): edit the class, not this
page. tests/test_docs.py fails when the two differ. -->

Every setting is an environment variable (or a line of `.env`), read by `models/settings.py`. A setting's name is
`PLIMSOLL_` and its field's name in capitals, unless the field names its variables itself; the case of a
variable's name does not matter. Settings the class groups under one comment are listed together, under it.
"""


@dataclass
class Group:
    """Fields the class writes one after another, with the comment that heads them (if any)."""

    comment: str = ""
    names: list[str] = field(default_factory=list)


def source_comments() -> tuple[dict[str, str], list[Group]]:
    """Each field's own comments (on its lines), and the fields in groups: a comment above a field heads a new
    group, and so does a blank line."""
    source = inspect.getsource(Settings)
    comments = {
        token.start[0]: token.string.lstrip("#").strip()
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    lines = source.splitlines()
    [cls] = ast.parse(source).body
    assert isinstance(cls, ast.ClassDef)
    trailing: dict[str, str] = {}
    groups: list[Group] = []
    previous_end = cls.body[0].lineno - 1 if cls.body else 0
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            previous_end = node.end_lineno or node.lineno
            continue
        name = node.target.id
        above: list[str] = []
        line = node.lineno - 1
        while line > previous_end and lines[line - 1].strip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        gap = any(not lines[i - 1].strip() for i in range(previous_end + 1, node.lineno))
        if above or gap or not groups:
            groups.append(Group(comment=" ".join(above)))
        groups[-1].names.append(name)
        end = node.end_lineno or node.lineno
        inside = [comments[line] for line in range(node.lineno, end + 1) if line in comments]
        if inside:
            trailing[name] = " ".join(inside)
        previous_end = end
    return trailing, groups


def variables(name: str, info: FieldInfo) -> list[str]:
    """The environment variables a field is read from: its validation alias's choices, else the prefixed name."""
    alias = info.validation_alias or info.alias
    if alias is None:
        prefix = str(Settings.model_config.get("env_prefix", ""))
        return [f"{prefix}{name}".upper()]
    choices = alias.choices if isinstance(alias, AliasChoices) else [alias]
    return [
        str(choice.path[0] if isinstance(choice, AliasPath) else choice).upper()
        for choice in choices
        if not isinstance(choice, AliasPath) or isinstance(choice.path[0], str)
    ]


def type_name(annotation: Any) -> str:
    if typing.get_origin(annotation) is typing.Literal:
        return " or ".join(f"`{value}`" for value in typing.get_args(annotation))
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " or ".join(type_name(arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return "none"
    if typing.get_origin(annotation) is dict:
        return "JSON object"
    if isinstance(annotation, type):
        return {SecretStr: "secret", bool: "true or false", str: "text", int: "integer", float: "number"}.get(
            annotation, annotation.__name__
        )
    return str(annotation)


def bounds(info: FieldInfo) -> str:
    signs = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    said = []
    for constraint in info.metadata:
        if isinstance(constraint, annotated_types.BaseMetadata):
            said += [
                f"{sign} {getattr(constraint, bound)}" for bound, sign in signs.items() if hasattr(constraint, bound)
            ]
    return ", ".join(said)


def default(info: FieldInfo) -> str:
    value = info.get_default(call_default_factory=True)
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (dict, list)):
        return f"`{json.dumps(value)}`"
    return f"`{value}`"


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    trailing, groups = source_comments()
    fields = Settings.model_fields
    out = [INTRO]
    for group in groups:
        out.append("")
        if group.comment:
            out += [group.comment, ""]
        out += ["| variable | type | default | |", "|---|---|---|---|"]
        for name in group.names:
            info = fields[name]
            kind = type_name(info.annotation)
            if limits := bounds(info):
                kind += f", {limits}"
            said = "; ".join(part for part in (info.description, trailing.get(name)) if part)
            names = ", ".join(f"`{variable}`" for variable in variables(name, info))
            out.append(f"| {names} | {cell(kind)} | {cell(default(info))} | {cell(said)} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the page is up to date")
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        if PAGE.read_text(encoding="utf-8") != page:
            print(f"{PAGE.relative_to(ROOT)} differs from models/settings.py: run `make docs-config`", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
