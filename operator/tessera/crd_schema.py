"""Structural schemas: a pydantic model's JSON Schema as the structural OpenAPI v3 schema the
API server accepts in a CustomResourceDefinition ($refs inlined, `X | None` unwrapped, key
schemas as CEL rules, keys in reading order). Pure data transform, for tessera.crd; imports
only tessera.api and pydantic (no kopf, kubernetes or catalog)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel

from tessera import api

# Schema keywords the API server accepts in a structural schema, in the order the YAML shows
# them (type and description first; x-kubernetes-* extensions come last).
_ORDER = (
    "type",
    "description",
    "format",
    "enum",
    "default",
    "nullable",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
    "properties",
    "items",
    "additionalProperties",
)
_KEPT = frozenset(_ORDER)
_DROPPED = {"title", "examples", "$defs"}
_FORMATS = {"date-time", "date", "duration", "int32", "int64", "float", "double", "byte"}


class SchemaError(ValueError):
    """A pydantic JSON Schema construct that has no structural CRD equivalent."""


def _deref(node: dict[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """Inlines a `$ref` (or a one-element allOf); the referring node's own keys win."""
    node = dict(node)
    if "allOf" in node:
        (only,) = node.pop("allOf")
        node = {**only, **node}
    while "$ref" in node:
        name = node.pop("$ref").rsplit("/", 1)[-1]
        if name not in defs:
            raise SchemaError(f"unresolved $ref {name!r}")
        target = dict(defs[name])
        rules = target.get("x-kubernetes-validations", []) + node.get(
            "x-kubernetes-validations", []
        )
        node = {**target, **node}
        if rules:
            node["x-kubernetes-validations"] = rules
    return node


def _key_rule(what: str, keys: dict[str, Any]) -> dict[str, str]:
    """A CEL rule for the keys of a map: CRD schemas have no propertyNames/patternProperties."""
    if "enum" in keys:
        allowed = ", ".join(str(v) for v in keys["enum"])
        literal = json.dumps([str(v) for v in keys["enum"]])
        return api.cel(
            f"self.all(k, k in {literal})",
            f"{what} keys must be one of: {allowed}",
            message_expression=f"'{what} key ' + self.filter(k, !(k in {literal}))[0] + "
            f"' is not one of: {allowed}'",
        )
    if "pattern" in keys:
        pattern = keys["pattern"]
        return api.cel(
            f"self.all(k, k.matches(r'{pattern}'))",
            f"{what} keys must match {pattern}",
            message_expression=f"'{what} key ' + self.filter(k, !k.matches(r'{pattern}'))[0] + "
            f"' must match ' + r'{pattern}'",
        )
    raise SchemaError(f"unsupported key schema {keys!r}")


def structural(
    node: dict[str, Any],
    defs: Mapping[str, Any],
    *,
    defaults: bool = True,
    name: str = "",
) -> dict[str, Any]:
    """One pydantic JSON Schema node as a structural OpenAPI v3 schema node, recursively.

    Inlines `$ref`s, takes the non-null branch of `X | None`, turns `const` into a one-value
    enum, `exclusiveMinimum: n` into `minimum: n, exclusiveMinimum: true`, free-form objects
    into `x-kubernetes-preserve-unknown-fields`, key schemas (`propertyNames`,
    `patternProperties`) into `additionalProperties` plus a CEL rule; drops titles. `defaults`
    False drops `default` (status is written by the operator, never defaulted).
    """
    node = _deref(node, defs)
    if node.get("x-kubernetes-int-or-string"):
        return {k: v for k, v in node.items() if k not in _DROPPED}
    if "anyOf" in node:
        branches = [b for b in node.pop("anyOf") if b != {"type": "null"}]
        if len(branches) != 1:
            raise SchemaError(f"{name}: unions other than `X | None` have no structural form")
        if node.get("default", ...) is None:
            node.pop("default")
        node = {**_deref(branches[0], defs), **node}
        return structural(node, defs, defaults=defaults, name=name)
    if "oneOf" in node or "not" in node:
        raise SchemaError(f"{name}: oneOf/not have no structural form")
    if "const" in node:
        node["enum"] = [node.pop("const")]

    out: dict[str, Any] = {}
    rules: list[dict[str, str]] = []
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "properties":
            out[key] = {
                prop: structural(sub, defs, defaults=defaults, name=f"{name}.{prop}")
                for prop, sub in value.items()
            }
        elif key == "items":
            out[key] = structural(value, defs, defaults=defaults, name=f"{name}[*]")
        elif key == "additionalProperties":
            if value is True:
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif value is not False:
                out[key] = structural(value, defs, defaults=defaults, name=f"{name}[*]")
        elif key == "patternProperties":
            ((pattern, sub),) = value.items()
            out["additionalProperties"] = structural(
                sub, defs, defaults=defaults, name=f"{name}[*]"
            )
            rules.append(_key_rule(name.rsplit(".", 1)[-1], {"pattern": pattern}))
        elif key == "propertyNames":
            rules.append(_key_rule(name.rsplit(".", 1)[-1], _deref(value, defs)))
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "default":
            if defaults and value is not None:
                out[key] = value
        elif key == "format":
            if value in _FORMATS:
                out[key] = value
        elif key == "uniqueItems":
            if value:
                out["x-kubernetes-list-type"] = "set"
        elif key == "x-kubernetes-validations":
            rules.extend(value)
        elif key in _KEPT or key.startswith("x-kubernetes-"):
            out[key] = copy.deepcopy(value)
        else:
            raise SchemaError(f"{name}: unsupported schema keyword {key!r}")
    _mention_default(out)
    if (
        out.get("type") == "object"
        and "properties" not in out
        and "additionalProperties" not in out
    ):
        out["x-kubernetes-preserve-unknown-fields"] = True
    if rules:
        out["x-kubernetes-validations"] = [rule_order(r) for r in rules]
    return _ordered(out)


_RULE_ORDER = ("rule", "message", "messageExpression", "fieldPath", "reason")


def rule_order(rule: Mapping[str, str]) -> dict[str, str]:
    """A CEL rule's keys in reading order (the rule, then its message), for the YAML."""
    return {key: rule[key] for key in _RULE_ORDER if key in rule}


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    """Keys in reading order (type and description first, extensions last), for the YAML."""
    rank = {key: i for i, key in enumerate(_ORDER)}
    return dict(sorted(node.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))


def _mention_default(node: dict[str, Any]) -> None:
    """Appends a scalar default to the description: `kubectl explain` does not show defaults."""
    value = node.get("default")
    if value is None or value == "" or isinstance(value, dict | list):
        return
    text = node.get("description", "")
    if "default" in text.lower():
        return
    if isinstance(value, bool):
        shown = str(value).lower()
    elif isinstance(value, float):
        shown = f"{value:g}"
    else:
        shown = str(value)
    node["description"] = f"{text} Defaults to {shown}.".strip()


def model_schema(
    model: type[BaseModel], *, defaults: bool = True, name: str = ""
) -> dict[str, Any]:
    """The structural schema of a pydantic model, with wire (camelCase) names."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return structural(raw, raw.get("$defs", {}), defaults=defaults, name=name)


def walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every node of a structural schema with its path, e.g. `.spec.accelerator.count`."""
    yield path, schema
    for prop, sub in schema.get("properties", {}).items():
        yield from walk(sub, f"{path}.{prop}")
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[*]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}.*")
