"""Results that say the same thing, shown once: across checks on one GPU (a GPU that stopped answering makes every
check on it unknown for one reason) and across GPUs (a profile that expects another model fails each of eight GPUs
alike). Two results say the same thing when their status, message, observed and expected values and remediation are
equal once each one's own GPU is taken out of them (its label, bus ID and index in commands), so that "GPU 3
(0000:5d:00.0) is a NVIDIA H200, not the expected …" on eight GPUs is one finding about GPUs 0–7, said as "GPU
<index> (<bus ID>) is a NVIDIA H200, …" under a head that names them.
"""

from __future__ import annotations

import json
import re
from dataclasses import field
from typing import Any, Hashable, Optional

from gpudiag.model import CheckResult, Status
from gpudiag.model.records import dataclass
from gpudiag.report.subject import Subject, subject

# Stand-ins for a GPU's own words in a text (NUL cannot survive report.text.clean, so no text from the node holds
# one): its label "GPU 3 (0000:5d:00.0)", its bus ID, its index where a command takes it, "GPU 3" elsewhere.
LABEL, BUS, INDEX, NAMED = "\x00label\x00", "\x00bus\x00", "\x00index\x00", "\x00gpu\x00"
_FOR_MANY = {LABEL: "GPU <index> (<bus ID>)", BUS: "<bus ID>", INDEX: "<index>", NAMED: "GPU <index>"}


def generic(text: str, about: Optional[Subject]) -> str:
    """`text` with the words of the GPU it is `about` replaced by stand-ins (a NIC's words stay: its name is in
    them, so that results about two NICs are two findings)."""
    if about is None or about.is_nic or not text:
        return text
    if about.index is not None:
        text = text.replace(about.label, LABEL)
    if about.bus:
        text = text.replace(about.bus, BUS)
    if about.index is not None:
        # `nvidia-smi -i 3`, `nvidia-smi -r -i 3`, `amd-smi reset --gpureset -g 3`, `amd-smi partition -g 3`
        text = re.sub(rf"(?<=-[ig] ){about.index}\b", INDEX, text)
        text = re.sub(rf"\bGPU {about.index}\b", NAMED, text)
    return text


def specific(text: str, about: Optional[Subject]) -> str:
    """A generic text said of the GPU it is `about` again."""
    if about is None or about.is_nic:
        return text
    words = {LABEL: about.label, BUS: about.bus or "", INDEX: str(about.index), NAMED: f"GPU {about.index}"}
    for stand_in, said in words.items():
        text = text.replace(stand_in, said)
    return text


def for_many(text: str) -> str:
    """A generic text said of several GPUs at once: a template of the GPU's words, `GPU <index> (<bus ID>)`,
    under a head that names the GPUs."""
    for stand_in, words in _FOR_MANY.items():
        text = text.replace(stand_in, words)
    return text


def compact(value: Any) -> str:
    """An observed or expected value as one line of text (JSON for structures)."""
    return value if isinstance(value, str) else json.dumps(value, default=str, separators=(", ", ": "),
                                                           ensure_ascii=False)


def gpu_ranges(indices: list[int]) -> str:
    """`0–7`, `0–2, 5, 7`: sorted, runs of three or more compacted."""
    ordered = sorted(set(indices))
    runs: list[list[int]] = []
    for index in ordered:
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ", ".join(f"{run[0]}–{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs)


@dataclass
class Group:
    """Results that say one thing: `checks` (in checklist order) each about every one of `subjects` (None: the
    node)."""
    status: Status
    members: list[CheckResult]
    checks: list[str] = field(default_factory=list)
    subjects: list[Optional[Subject]] = field(default_factory=list)

    @property
    def first(self) -> CheckResult:
        return self.members[0]

    @property
    def many_gpus(self) -> bool:
        return len(self.subjects) > 1

    def _said(self, text: str) -> str:
        about = subject(self.first)
        return for_many(generic(text, about)) if self.many_gpus else text

    def text(self, attribute: str) -> str:
        """The first member's message or remediation, said of every GPU of the group when there are several."""
        return self._said(getattr(self.first, attribute) or "")

    def said(self) -> str:
        """The message without the GPU's label it starts with, for a line that says where already."""
        about = subject(self.first)
        text = generic(self.first.message, about)
        for label in (LABEL, f"GPU at {BUS}"):
            if text.startswith(label):
                text = text[len(label):].lstrip(":").lstrip()
                break
        return for_many(text) if self.many_gpus else specific(text, about)

    def value(self, attribute: str) -> Optional[str]:
        """observed or expected as text (the members' are alike but for their GPUs); None when there is none."""
        value = getattr(self.first, attribute)
        return None if value is None else self._said(compact(value))

    def where(self) -> str:
        """`node`, `GPU 3 0000:5d:00.0`, `GPU at 0000:5d:00.0` (on the bus, not enumerated), `GPUs 0–7`, or
        `NIC mlx5_4 (0000:3b:00.0) port 1`."""
        nics = [s.label for s in self.subjects if s is not None and s.is_nic]
        gpus = [s for s in self.subjects if s is not None and not s.is_nic]
        indexed = [s.index for s in gpus if s.index is not None]
        if not gpus and not nics:
            return "node"
        if len(self.subjects) == 1 and gpus:
            return f"GPU {gpus[0].index} {gpus[0].bus or ''}".rstrip() if indexed else f"GPU at {gpus[0].bus}"
        named = [f"GPUs {gpu_ranges(indexed)}"] if indexed else []
        unnamed = [s.bus for s in gpus if s.index is None]
        if unnamed:
            named.append(f"GPUs at {', '.join(unnamed)}" if len(unnamed) <= 3 else f"{len(unnamed)} GPUs on the PCI bus")
        named.extend(nics)
        return " and ".join(named + (["node"] if None in self.subjects else []))

    def bus_ids(self) -> list[str]:
        return [(s.label if s.is_nic else s.bus) or f"GPU {s.index}: unknown bus" for s in self.subjects
                if s is not None]


def _key(result: CheckResult) -> tuple:
    about = subject(result)

    def said(value: Any) -> Optional[str]:
        return None if value is None else generic(compact(value), about)

    return (result.status, generic(result.message, about), said(result.observed), said(result.expected),
            generic(result.remediation, about))


def same_finding(one: CheckResult, other: CheckResult) -> bool:
    """Whether two results say the same thing (each of its own GPU)."""
    return _key(one) == _key(other)


def group(results: list[CheckResult], across_gpus: bool = True) -> list[Group]:
    """`results` (in their order) as groups that each say one thing. Across GPUs, the checks of one finding are
    grouped by the GPUs they were found on, so that a group never claims a check on a GPU it was not found on;
    without `across_gpus`, a group is one GPU's (or the node's)."""
    findings: dict[tuple, list[CheckResult]] = {}
    for result in results:
        key = _key(result) if across_gpus else (*_key(result), subject(result))
        findings.setdefault(key, []).append(result)
    groups: list[Group] = []
    for members in findings.values():
        per_check: dict[str, list[CheckResult]] = {}
        for result in members:
            per_check.setdefault(result.check, []).append(result)
        by_devices: dict[tuple, Group] = {}
        for check, found in per_check.items():
            subjects = tuple(dict.fromkeys(subject(r) for r in found))
            made = by_devices.get(subjects)
            if made is None:
                made = by_devices[subjects] = Group(found[0].status, [], [], list(subjects))
                groups.append(made)
            made.checks.append(check)
            made.members.extend(found)
    return groups
