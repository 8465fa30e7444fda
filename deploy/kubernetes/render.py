"""Render a kustomization of this folder without kustomize: ``python deploy/kubernetes/render.py
deploy/kubernetes/overlays/gpu`` prints what ``kubectl kustomize`` prints (the same objects).

Only what these manifests use is supported, and anything else is refused rather than
ignored: ``resources`` (files and folders with a kustomization), ``namespace``, ``labels``
(``pairs``, added to each object's metadata), ``images`` (``newName``, ``newTag``) and
``patches`` given as inline JSON 6902 operations (``add``, ``replace``, ``remove``) with a
``target`` kind and name. Written by hand because no maintained Python package renders
kustomizations, and the tests (tests/deploy/test_kubernetes.py) must run where kustomize is
not installed.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import yaml

#: Kinds that live outside any namespace.
CLUSTER_KINDS = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume"}
_KNOWN_KEYS = {"apiVersion", "kind", "resources", "namespace", "labels", "images", "patches"}


def render(folder: Path) -> list[dict[str, Any]]:
    """The objects of the kustomization in ``folder``."""
    path = folder / "kustomization.yaml"
    spec = yaml.safe_load(path.read_text())
    unknown = set(spec) - _KNOWN_KEYS
    if unknown:
        raise ValueError(f"{path}: not supported here: {sorted(unknown)}")
    objects: list[dict[str, Any]] = []
    for resource in spec.get("resources", []):
        target = folder / resource
        if target.is_dir():
            objects += render(target)
        else:
            objects += [o for o in yaml.safe_load_all(target.read_text()) if o]
    for patch in spec.get("patches", []):
        _patch(objects, patch, path)
    for image in spec.get("images", []):
        _image(objects, image)
    for group in spec.get("labels", []):
        if set(group) - {"pairs"}:
            raise ValueError(f"{path}: labels support pairs only, got {sorted(group)}")
        for obj in objects:
            obj.setdefault("metadata", {}).setdefault("labels", {}).update(group["pairs"])
    namespace = spec.get("namespace")
    if namespace is not None:
        for obj in objects:
            if obj["kind"] not in CLUSTER_KINDS:
                obj["metadata"]["namespace"] = namespace
    return objects


def _patch(objects: list[dict[str, Any]], patch: dict[str, Any], where: Path) -> None:
    target = patch.get("target", {})
    if set(target) - {"kind", "name"} or "patch" not in patch:
        raise ValueError(f"{where}: a patch needs target kind/name and an inline patch")
    operations = yaml.safe_load(patch["patch"])
    matched = [
        o
        for o in objects
        if o["kind"] == target.get("kind", o["kind"])
        and o["metadata"]["name"] == target.get("name", o["metadata"]["name"])
    ]
    if not matched:
        raise ValueError(f"{where}: the patch's target {target} matches nothing")
    for obj in matched:
        for operation in operations:
            _apply(obj, operation)


def _apply(obj: dict[str, Any], operation: dict[str, Any]) -> None:
    """One JSON 6902 operation (RFC 6902; ``~1`` is ``/``, ``~0`` is ``~``)."""
    op, path = operation["op"], operation["path"]
    keys = [k.replace("~1", "/").replace("~0", "~") for k in path.split("/")[1:]]
    parent: Any = obj
    for key in keys[:-1]:
        parent = parent[int(key)] if isinstance(parent, list) else parent[key]
    last = keys[-1]
    if op in ("add", "replace"):
        value = copy.deepcopy(operation["value"])
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if op == "add":
                parent.insert(index, value)
            else:
                parent[index] = value
        else:
            if op == "replace" and last not in parent:
                raise ValueError(f"replace of {path}: nothing there")
            parent[last] = value
    elif op == "remove":
        del parent[int(last) if isinstance(parent, list) else last]
    else:
        raise ValueError(f"JSON patch op {op!r} is not supported here")


def _image(objects: list[dict[str, Any]], image: dict[str, Any]) -> None:
    for obj in objects:
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        for container in pod.get("containers", []) + pod.get("initContainers", []):
            name, _, tag = container["image"].partition(":")
            if name == image["name"]:
                name = image.get("newName", name)
                tag = image.get("newTag", tag)
                container["image"] = f"{name}:{tag}" if tag else name


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python deploy/kubernetes/render.py FOLDER", file=sys.stderr)
        return 2
    print(yaml.safe_dump_all(render(Path(argv[0])), sort_keys=False), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
