"""Write (or check) the reference pages generated from what they describe: docs/configuration.md
from template.yaml's parameters and the array spec model (``ArraySpec`` and its nested models),
docs/api.md from openapi.json (``python tools/openapi.py`` writes that one from the handlers).

python tools/configuration_doc.py           write docs/configuration.md and docs/api.md
python tools/configuration_doc.py --check   exit 1 if either is not what would be generated
"""

import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "core")]

from vsa_core.arrays.spec import ArraySpec  # noqa: E402

CONFIGURATION = ROOT / "docs" / "configuration.md"
API = ROOT / "docs" / "api.md"
OPENAPI = ROOT / "openapi.json"
TEMPLATE = ROOT / "template.yaml"
SPEC_ANCHOR = "configuration.md#the-array-spec"

Schema = Mapping[str, Any]
PLURAL = {"string", "integer", "number", "boolean", "object"}
METHODS = ("get", "put", "post", "patch", "delete")


class _CfnLoader(yaml.SafeLoader):
    """A SafeLoader that also reads CloudFormation short-form tags (!Ref, !Sub, !If, …), as the
    plain value under the tag: the resources use them; the Parameters section read here has none."""


def _tag(loader: yaml.SafeLoader, _suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)  # type: ignore[arg-type]


_CfnLoader.add_multi_constructor("!", _tag)


def template_parameters() -> dict[str, dict[str, Any]]:
    """template.yaml's Parameters section, in the template's order."""
    # _CfnLoader is a SafeLoader that only adds the CloudFormation tags
    template = yaml.load(TEMPLATE.read_text(), Loader=_CfnLoader)  # noqa: S506
    parameters: dict[str, dict[str, Any]] = template["Parameters"]
    return parameters


# --- Markdown -------------------------------------------------------------------------------


def cell(text: str) -> str:
    """One table cell: whitespace collapsed, RST ``literals`` as Markdown `code`, pipes escaped
    (GitHub's tables split on a bare pipe even inside a code span)."""
    text = re.sub(r"\s+", " ", text).strip().replace("``", "`")
    return text.replace("|", r"\|")


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]


def code(value: object) -> str:
    """A value as an operator writes it in YAML, in a code span."""
    if isinstance(value, str):
        return '`""`' if value == "" else f"`{value}`"
    return f"`{json.dumps(value)}`"


def number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) or not value.is_integer() else f"{int(value):,}"


def span(node: Mapping[str, Any], low: str, high: str, unit: str = "") -> str:
    """``node``'s bounds ``low``..``high`` in words ("1 to 16 items", "at most 30"), or ""."""
    if low in node and high in node:
        return f"{number(node[low])} to {number(node[high])}{unit}"
    if low in node:
        return f"at least {number(node[low])}{unit}"
    if high in node:
        return f"at most {number(node[high])}{unit}"
    return ""


# --- Stack parameters -----------------------------------------------------------------------


def parameter_constraints(parameter: Mapping[str, Any]) -> str:
    """AllowedValues, AllowedPattern, Min/MaxValue, Min/MaxLength and ConstraintDescription."""
    parts = []
    if "AllowedValues" in parameter:
        parts.append("one of " + ", ".join(code(v) for v in parameter["AllowedValues"]))
    if "AllowedPattern" in parameter:
        parts.append(f"pattern `{parameter['AllowedPattern']}`")
    parts.append(span(parameter, "MinValue", "MaxValue"))
    parts.append(span(parameter, "MinLength", "MaxLength", " characters"))
    text = "; ".join(filter(None, parts)) or "any"
    if "ConstraintDescription" in parameter:
        text += f" ({parameter['ConstraintDescription']})"
    return text


def parameters_section() -> list[str]:
    rows = [
        (
            f"`{name}`",
            str(p["Type"]),
            code(p["Default"]) if "Default" in p else "required",
            parameter_constraints(p),
            str(p.get("Description", "")),
        )
        for name, p in template_parameters().items()
    ]
    return [
        "## Stack parameters",
        "",
        "Set once per deployment: `sam deploy --guided` asks for each, or `sam deploy "
        "--parameter-overrides Name=value ...`.",
        "",
        *table(("Parameter", "Type", "Default", "Allowed", "Description"), rows),
    ]


# --- JSON schema fields (the spec model, the API's request bodies) ---------------------------


@dataclass(frozen=True)
class SchemaField:
    """One field of a JSON schema as a reader looks it up: where it is written and what it takes."""

    path: str
    type: str
    need: str
    bounds: str
    description: str

    def row(self) -> tuple[str, ...]:
        return (f"`{self.path}`", self.type, self.need, self.bounds, self.description)


def resolve(node: Schema, defs: Schema) -> Schema:
    """``node`` with an optional value (anyOf [X, null]) taken as X and a $ref followed; a union
    of several schemas stays ``{"anyOf": [...]}`` with each member resolved."""
    options: list[Schema] = [o for o in node.get("anyOf", [node]) if o.get("type") != "null"]
    if len(options) > 1:
        return {"anyOf": [resolve(o, defs) for o in options]}
    target = options[0]
    if "$ref" in target:
        found: Schema = defs[target["$ref"].rsplit("/", 1)[-1]]
        return found
    return target


def variants(node: Schema) -> list[Schema]:
    """The object schemas a value may be: one, or each member of a union of objects."""
    members = node.get("anyOf", [node])
    return [m for m in members if "properties" in m]


def type_name(node: Schema, defs: Schema) -> str:
    if "anyOf" in node:
        return " or ".join(
            _variant_name(m) if "properties" in m else type_name(m, defs) for m in node["anyOf"]
        )
    kind = node.get("type", "any")
    if kind == "array":
        item = type_name(resolve(node.get("items", {}), defs), defs)
        return "list of " + (f"{item}s" if item in PLURAL else item)
    if kind == "object" and "properties" not in node:
        values = [*node.get("patternProperties", {}).values(), node.get("additionalProperties")]
        value = next((v for v in values if isinstance(v, Mapping)), None)
        return f"map of string to {type_name(value, defs)}" if value else "object"
    if "format" in node:
        return f"{kind} ({node['format']})"
    return str(kind)


def _variant_name(model: Schema) -> str:
    required = model.get("required", [])
    return f"{model['title']} ({', '.join(required)})" if required else str(model["title"])


def bounds(node: Schema) -> str:
    parts = []
    if "const" in node:
        parts.append(f"only {code(node['const'])}")
    if "enum" in node:
        parts.append("one of " + ", ".join(code(v) for v in node["enum"]))
    if "exclusiveMinimum" in node:
        parts.append(f"above {number(node['exclusiveMinimum'])}")
    parts.append(span(node, "minimum", "maximum"))
    if "exclusiveMaximum" in node:
        parts.append(f"below {number(node['exclusiveMaximum'])}")
    parts.append(span(node, "minLength", "maxLength", " characters"))
    parts.append(span(node, "minItems", "maxItems", " items"))
    parts.append(span(node, "minProperties", "maxProperties", " entries"))
    return "; ".join(filter(None, parts + _patterns(node)))


def _patterns(node: Schema) -> list[str]:
    found = []
    if "pattern" in node:
        found.append(f"pattern `{node['pattern']}`")
    if "pattern" in node.get("items", {}):
        found.append(f"each: pattern `{node['items']['pattern']}`")
    for key, value in node.get("patternProperties", {}).items():
        found.append(f"keys: pattern `{key}`")
        if "pattern" in value:
            found.append(f"values: pattern `{value['pattern']}`")
    return found


def need(name: str, prop: Schema, model: Schema, union: bool = False) -> str:
    """required / default x / optional; in a member of a union, which member requires it."""
    if name in model.get("required", []):
        return f"required ({model['title']})" if union else "required"
    if "default" not in prop or prop["default"] is None:
        return "optional"
    return f"default {code(prop['default'])}"


def description(prop: Schema, node: Schema, defs: Schema) -> str:
    """The field's own description, else its model's (an object) or its items' model's (a list)."""
    if "description" in prop:
        return str(prop["description"])
    items = resolve(node.get("items", {}), defs) if node.get("type") == "array" else node
    return str(items.get("description", ""))


def schema_fields(
    model: Schema, defs: Schema, prefix: str = "", union: bool = False
) -> Iterator[SchemaField]:
    """Every field of ``model`` and of the models under it, depth first, as ``a.b`` and
    ``list[].field`` paths; ``union``: ``model`` is one member of a union."""
    for name, prop in model.get("properties", {}).items():
        node = resolve(prop, defs)
        path = f"{prefix}{name}"
        yield SchemaField(
            path,
            type_name(node, defs),
            need(name, prop, model, union),
            bounds(node),
            description(prop, node, defs),
        )
        yield from _nested(node, defs, path)


def _nested(node: Schema, defs: Schema, path: str) -> Iterator[SchemaField]:
    if node.get("type") == "array":
        node, path = resolve(node.get("items", {}), defs), f"{path}[]"
    members = variants(node)
    for member in members:
        yield from schema_fields(member, defs, f"{path}.", union=len(members) > 1)


def spec_fields() -> list[SchemaField]:
    schema = ArraySpec.model_json_schema(by_alias=True)
    return list(schema_fields(schema, schema.get("$defs", {})))


def spec_section() -> list[str]:
    return [
        "## The array spec",
        "",
        "One YAML (or JSON) document per array: `vsactl apply -f array.yaml`, or the body of "
        "`PUT /arrays/{arrayId}` ([api.md](api.md)). Copyable, commented examples are in "
        "[examples/](../examples). A path `a.b` is the field `b` of the object `a`; `a[].b` is the "
        "field `b` of each item of the list `a`. *Required* means required whenever the object "
        "holding the field is given; *(Name)* says which kind of item requires it, where a list "
        "takes two kinds. Unknown fields are refused.",
        "",
        *table(
            ("Field", "Type", "Required / default", "Bounds", "Description"),
            [f.row() for f in spec_fields()],
        ),
    ]


def configuration_page() -> str:
    lines = [
        "# Configuration reference",
        "",
        "Generated by `make docs` (`tools/configuration_doc.py`) from template.yaml and the spec "
        "model (`vsa_core.arrays.spec.ArraySpec`); do not edit by hand: change the template or the "
        "model and run `make docs` (tests/infra/test_reference_docs.py fails while this page differs).",
        "",
        "Two things configure the control plane: the **stack parameters**, once per deployment, "
        "and the **array spec**, once per array.",
        "",
        *parameters_section(),
        "",
        *spec_section(),
    ]
    return "\n".join(lines) + "\n"


# --- The API ----------------------------------------------------------------------------------


def schema_name(node: Schema) -> str:
    ref = node.get("$ref")
    return str(ref).rsplit("/", 1)[-1] if ref else "JSON"


def linked(name: str) -> str:
    if name == "ArraySpec":
        return f"[ArraySpec]({SPEC_ANCHOR})"
    return f"[{name}](#{name.lower()})" if name != "JSON" else name


def parameter_row(parameter: Schema, defs: Schema) -> tuple[str, ...]:
    node = resolve(parameter["schema"], defs)
    return (
        f"`{parameter['name']}`",
        parameter["in"],
        "required" if parameter.get("required") else need(parameter["name"], parameter["schema"], {}),
        "; ".join(filter(None, (type_name(node, defs), bounds(node)))),
        str(parameter.get("description", "")),
    )


def request_body(operation: Schema) -> list[str]:
    body = operation.get("requestBody")
    if body is None:
        return ["Request body: none."]
    schema = body["content"]["application/json"]["schema"]
    required = "required" if body.get("required") else "optional"
    return [
        f"Request body ({required}, JSON): {linked(schema_name(schema))}: {cell(body.get('description', ''))}"
    ]


def response_rows(operation: Schema) -> Sequence[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for status, response in sorted(operation["responses"].items()):
        schema = response.get("content", {}).get("application/json", {}).get("schema", {})
        rows.append((status, str(response.get("description", "")), linked(schema_name(schema))))
    return rows


def operation_section(method: str, path: str, operation: Schema, defs: Schema) -> list[str]:
    lines = [f"### {method.upper()} {path}", "", f"{operation.get('summary', '')}.", ""]
    if operation.get("description"):
        lines += [cell(operation["description"]), ""]
    if operation.get("parameters"):
        header = ("Parameter", "In", "Required / default", "Type", "Description")
        rows = [parameter_row(p, defs) for p in operation["parameters"]]
        lines += [*table(header, rows), ""]
    lines += [*request_body(operation), ""]
    return lines + table(("Status", "Meaning", "Body"), response_rows(operation)) + [""]


def operations(document: Schema) -> Iterator[tuple[str, str, Schema]]:
    for path, methods in sorted(document["paths"].items()):
        for method, operation in sorted(methods.items(), key=lambda m: METHODS.index(m[0])):
            yield method, path, operation


def used_schemas(document: Schema) -> list[str]:
    """The component schemas a request body or a response names, ArraySpec aside (its page is
    configuration.md), in name order."""
    names = set()
    for _method, _path, operation in operations(document):
        body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
        names.add(schema_name(body.get("schema", {})))
        for response in operation["responses"].values():
            names.add(schema_name(response.get("content", {}).get("application/json", {}).get("schema", {})))
    return sorted(names - {"JSON", "ArraySpec"})


def schema_section(name: str, defs: Schema) -> list[str]:
    model = defs[name]
    rows = [f.row() for f in schema_fields(model, defs)]
    intro = [cell(model["description"]), ""] if "description" in model else []
    header = ("Field", "Type", "Required / default", "Bounds", "Description")
    return [f"### {name}", "", *intro, *table(header, rows), ""]


def api_intro(document: Schema) -> list[str]:
    info = document["info"]
    sigv4 = document["components"]["securitySchemes"]["sigv4"]["description"]
    return [
        "# API reference",
        "",
        "Generated by `make docs` (`tools/configuration_doc.py`) from openapi.json, which "
        "`python tools/openapi.py` generates from the handlers; do not edit by hand "
        "(tests/infra/test_reference_docs.py fails while this page differs).",
        "",
        f"**{info['title']}** (version {info['version']}). {info['summary']}",
        "",
        cell(info["description"]),
        "",
        f"Every operation needs a SigV4-signed request: {cell(sigv4)}. `vsactl` signs for you.",
        "",
    ]


def api_page() -> str:
    document = json.loads(OPENAPI.read_text())
    defs = document["components"]["schemas"]
    index = [
        (f"`{m.upper()}`", f"[`{p}`](#{_anchor(m, p)})", str(o.get("summary", "")))
        for m, p, o in operations(document)
    ]
    lines = [*api_intro(document), "## Operations", "", *table(("Method", "Path", "Summary"), index), ""]
    for method, path, operation in operations(document):
        lines += operation_section(method, path, operation, defs)
    lines += ["## Bodies", "", f"The array spec (the body of PUT): [configuration.md]({SPEC_ANCHOR}).", ""]
    for name in used_schemas(document):
        lines += schema_section(name, defs)
    return "\n".join(lines).rstrip("\n") + "\n"


def _anchor(method: str, path: str) -> str:
    """GitHub's anchor for the heading ``### METHOD /path``: lower case, punctuation dropped,
    spaces as hyphens."""
    return re.sub(r"[^a-z0-9 _-]", "", f"{method} {path}".lower()).replace(" ", "-")


# --- Entry point ------------------------------------------------------------------------------


def pages() -> dict[Path, str]:
    return {CONFIGURATION: configuration_page(), API: api_page()}


def main() -> int:
    generated = pages()
    if "--check" in sys.argv:
        stale = [p for p, text in generated.items() if not p.exists() or p.read_text() != text]
        for page in stale:
            print(f"{page.relative_to(ROOT)} is out of date: run `make docs` and commit it", file=sys.stderr)
        return 1 if stale else 0
    for page, text in generated.items():
        page.write_text(text)
        print(f"wrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
