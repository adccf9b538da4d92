"""A small kustomize, for checking deploy/kubernetes where ``kubectl`` is not installed.

It renders only the subset of kustomize those files use, and refuses anything else
(so a new feature in an overlay fails loudly here instead of being skipped):

- ``resources``: files (multi-document YAML) and folders with a kustomization.yaml;
- ``components``: folders of ``kind: Component`` that add resources (no edits);
- ``patches``: ``- path: file`` strategic-merge patches, matched by kind and name;
  maps merge key by key, lists of maps with a ``name`` merge item by item, other
  lists are replaced;
- ``labels``: ``pairs`` on every resource's metadata (``includeSelectors: false``);
- ``images``: ``name`` -> ``newName`` / ``newTag`` in pod templates;
- ``replicas``: ``name`` + ``count``;
- ``namespace``: set on every namespaced resource.

Where ``kubectl`` is installed, tests/deploy/test_kubernetes.py checks that this
renders exactly what ``kubectl kustomize`` does.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

Resource = dict[str, Any]
SUPPORTED = {"apiVersion", "kind", "resources", "components", "patches", "labels", "images", "replicas", "namespace"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PriorityClass"}
SCALED = {"Deployment", "StatefulSet", "ReplicaSet"}
POD_OWNERS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


class Unsupported(Exception):
    """The kustomization uses something this renderer does not do."""


def load_all(path: Path) -> list[Resource]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def build(folder: Path) -> list[Resource]:
    """The resources ``kubectl kustomize folder`` would print (in no particular order)."""
    k = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = set(k) - SUPPORTED
    if unknown:
        raise Unsupported(f"{folder}: {sorted(unknown)}")
    resources: list[Resource] = []
    for entry in k.get("resources", []):
        path = folder / entry
        resources += build(path) if path.is_dir() else load_all(path)
    for entry in k.get("components", []):
        component = folder / entry
        ck = yaml.safe_load((component / "kustomization.yaml").read_text())
        if ck.get("kind") != "Component" or set(ck) - {"apiVersion", "kind", "resources"}:
            raise Unsupported(f"{component}: only a kind: Component with resources")  # no edits of ours
        resources += build(component)
    for patch in k.get("patches", []):
        if set(patch) != {"path"}:
            raise Unsupported(f"{folder}: patches other than `- path:` ({patch})")
        for doc in load_all(folder / patch["path"]):
            target = _find(resources, doc["kind"], doc["metadata"]["name"])
            merged = merge(target, doc)
            target.clear()
            target.update(merged)
    for group in k.get("labels", []):
        if group.get("includeSelectors") or group.get("includeTemplates"):
            raise Unsupported(f"{folder}: labels on selectors or templates")
        for r in resources:
            r["metadata"].setdefault("labels", {}).update(group["pairs"])
    for image in k.get("images", []):
        for r in resources:
            for container in _containers(r):
                container["image"] = _retag(container["image"], image)
    for replicas in k.get("replicas", []):
        scaled = [r for r in resources if r["kind"] in SCALED and r["metadata"]["name"] == replicas["name"]]
        if len(scaled) != 1:
            raise Unsupported(f"replicas: {len(scaled)} workloads named {replicas['name']}")
        scaled[0]["spec"]["replicas"] = replicas["count"]
    if "namespace" in k:
        for r in resources:
            if r["kind"] not in CLUSTER_SCOPED:
                r["metadata"]["namespace"] = k["namespace"]
    return resources


def merge(base: Any, patch: Any) -> Any:
    """A strategic merge, as far as these files need it."""
    if isinstance(base, dict) and isinstance(patch, dict):
        if any(key.startswith("$") for key in patch):
            raise Unsupported(f"patch directive {sorted(patch)}")
        out = copy.deepcopy(base)
        for key, value in patch.items():
            out[key] = merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(patch, list) and all(isinstance(i, dict) and "name" in i for i in base + patch):
        out = copy.deepcopy(base)
        for item in patch:
            at = next((n for n, b in enumerate(out) if b["name"] == item["name"]), None)
            if at is None:
                out.append(copy.deepcopy(item))
            else:
                out[at] = merge(out[at], item)
        return out
    return copy.deepcopy(patch)


def _find(resources: list[Resource], kind: str, name: str) -> Resource:
    found = [r for r in resources if r["metadata"]["name"] == name and r["kind"] == kind]
    if len(found) != 1:
        raise Unsupported(f"{kind} {name}: {len(found)} matches")
    return found[0]


def _containers(r: Resource) -> list[dict[str, Any]]:
    if r["kind"] not in POD_OWNERS:
        return []
    pod = r["spec"]["template"]["spec"]
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def _retag(image: str, rule: dict[str, str]) -> str:
    name, _, tag = image.partition(":")
    if name != rule["name"]:
        return image
    return f"{rule.get('newName', name)}:{rule.get('newTag', tag)}"
