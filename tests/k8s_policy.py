"""Kubernetes admission and network rules, evaluated offline over rendered specs (no API server here).

- ``restricted_violations(pod_spec)``: the Pod Security Standards ``restricted`` profile, which
  includes ``baseline`` (Kubernetes 1.33, https://kubernetes.io/docs/concepts/security/pod-security-standards/):
  one message per failed control, as the admission controller lists them in its refusal.
- ``Network``: NetworkPolicy semantics (https://kubernetes.io/docs/concepts/services-networking/network-policies/):
  a connection is allowed when the source's egress and the destination's ingress both allow it; a pod
  no policy selects for a direction is not isolated in it. Peers: ``podSelector`` (the policy's
  namespace), ``namespaceSelector``, both (the intersection), ``ipBlock`` (addresses outside the
  cluster's pods); ports by number, range (``endPort``) or name.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
}  # fmt: skip
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for key in ("initContainers", "containers", "ephemeralContainers") for c in pod.get(key) or []]


def restricted_violations(pod: Mapping[str, Any]) -> list[str]:
    """The ``restricted`` controls ``pod`` (a PodSpec) fails; empty when it is admitted."""
    failed: list[str] = []
    pod_context = pod.get("securityContext") or {}
    containers = _containers(pod)
    contexts = [(c.get("name", "?"), c.get("securityContext") or {}) for c in containers]
    everywhere = [("pod", pod_context), *contexts]
    # baseline
    for name, context in everywhere:
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            failed.append(f"{name}: hostProcess")
        selinux = context.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            failed.append(f"{name}: seLinuxOptions")
        if (context.get("appArmorProfile") or {}).get("type", "RuntimeDefault") not in {
            "RuntimeDefault",
            "Localhost",
        }:
            failed.append(f"{name}: appArmorProfile")
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            failed.append(f"{name}: seccompProfile Unconfined")
        if context.get("runAsUser") == 0:
            failed.append(f"{name}: runAsUser=0")
    if pod_context.get("runAsNonRoot") is False:  # refused even where every container sets true
        failed.append("pod: runAsNonRoot is false")
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            failed.append(f"pod: {key}")
    for sysctl in pod_context.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            failed.append(f"pod: sysctl {sysctl.get('name')}")
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            failed.append(f"volume {volume.get('name')}: {sorted(kinds - RESTRICTED_VOLUMES)}")
    for container, (name, context) in zip(containers, contexts, strict=True):
        if context.get("privileged"):
            failed.append(f"{name}: privileged")
        if any(port.get("hostPort") for port in container.get("ports") or []):
            failed.append(f"{name}: hostPort")
        if context.get("procMount", "Default") != "Default":
            failed.append(f"{name}: procMount")
        capabilities = context.get("capabilities") or {}
        if not set(capabilities.get("add") or []) <= {"NET_BIND_SERVICE"} & BASELINE_CAPABILITIES:
            failed.append(f"{name}: capabilities.add {capabilities.get('add')}")
        if "ALL" not in (capabilities.get("drop") or []):
            failed.append(f"{name}: capabilities.drop lacks ALL")
        if context.get("allowPrivilegeEscalation") is not False:
            failed.append(f"{name}: allowPrivilegeEscalation is not false")
        # runAsNonRoot and seccomp may come from the pod; a container may not undo them.
        if context.get("runAsNonRoot") is False or not (
            context.get("runAsNonRoot") or pod_context.get("runAsNonRoot")
        ):
            failed.append(f"{name}: runAsNonRoot is not true")
        seccomp = (context.get("seccompProfile") or pod_context.get("seccompProfile") or {}).get("type")
        if seccomp not in {"RuntimeDefault", "Localhost"}:
            failed.append(f"{name}: seccompProfile is {seccomp or 'unset'}")
    return failed


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A label selector's match (``{}`` selects everything)."""
    selector = selector or {}
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        if not {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }[operator]:
            return False
    return True


@dataclass(frozen=True)
class Endpoint:
    """A pod (``namespace`` and ``labels``; ``ports`` maps its named container ports to numbers) or an
    address outside the cluster's pods (``address``)."""

    name: str
    namespace: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    ports: Mapping[str, int] = field(default_factory=dict)
    address: str | None = None


@dataclass
class Network:
    policies: list[Mapping[str, Any]]  # NetworkPolicy objects, each with metadata.namespace
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)

    def _namespace_labels(self, namespace: str) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": namespace, **self.namespace_labels.get(namespace, {})}

    def _policies(self, pod: Endpoint, direction: str) -> list[Mapping[str, Any]]:
        found = []
        for policy in self.policies:
            spec = policy["spec"]
            # Left out, policyTypes is Ingress, plus Egress when the policy has egress rules.
            types = spec.get("policyTypes") or (["Ingress"] + (["Egress"] if spec.get("egress") else []))
            if (
                policy["metadata"]["namespace"] == pod.namespace
                and direction in types
                and selects(spec.get("podSelector"), pod.labels)
            ):
                found.append(policy)
        return found

    def _peer_matches(self, peer: Mapping[str, Any], policy_namespace: str, other: Endpoint) -> bool:
        if "ipBlock" in peer:
            if other.address is None:
                return False
            address = ipaddress.ip_address(other.address)
            block = peer["ipBlock"]
            return address in ipaddress.ip_network(block["cidr"]) and not any(
                address in ipaddress.ip_network(excluded) for excluded in block.get("except") or []
            )
        if other.namespace is None:
            return False
        if "namespaceSelector" in peer:
            if not selects(peer["namespaceSelector"], self._namespace_labels(other.namespace)):
                return False
        elif other.namespace != policy_namespace:
            return False
        return selects(peer.get("podSelector"), other.labels)

    @staticmethod
    def _port_matches(
        rule_ports: Iterable[Mapping[str, Any]] | None, target: Endpoint, port: int, protocol: str
    ) -> bool:
        if not rule_ports:
            return True
        for rule_port in rule_ports:
            if rule_port.get("protocol", "TCP") != protocol:
                continue
            number = rule_port.get("port")
            if number is None:
                return True
            if isinstance(number, str):
                number = target.ports.get(number)
                if number == port:
                    return True
                continue
            if number <= port <= rule_port.get("endPort", number):
                return True
        return False

    def _allowed(
        self, pod: Endpoint, other: Endpoint, target: Endpoint, port: int, protocol: str, direction: str
    ) -> bool:
        policies = self._policies(pod, direction)
        if not policies:
            return True  # not isolated in this direction
        key, peers_key = ("egress", "to") if direction == "Egress" else ("ingress", "from")
        for policy in policies:
            for rule in policy["spec"].get(key) or []:
                peers = rule.get(peers_key)
                if (
                    not peers
                    or any(self._peer_matches(peer, policy["metadata"]["namespace"], other) for peer in peers)
                ) and self._port_matches(rule.get("ports"), target, port, protocol):
                    return True
        return False

    def allows(self, source: Endpoint, destination: Endpoint, port: int, protocol: str = "TCP") -> bool:
        """Whether ``source`` may open a connection to ``destination`` on ``port``."""
        egress = source.namespace is None or self._allowed(
            source, destination, destination, port, protocol, "Egress"
        )
        ingress = destination.namespace is None or self._allowed(
            destination, source, destination, port, protocol, "Ingress"
        )
        return egress and ingress
