"""What automation does with a result: a stable `action` and `fault_code` on every CheckResult.

Actions, weakest first (a node's action is its results' strongest):
- none:   nothing to do (pass, skip).
- watch:  keep the GPU in service; alert, and look when convenient (warnings, values that could not be read).
- drain:  stop scheduling onto the GPU/node until a person fixes the cause (configuration, cabling, firmware).
- reset:  drain, then reset the GPU (nvidia-smi -r / amd-smi reset); a pending repair or a hung GPU.
- reboot: drain, then reboot or power-cycle the node; a GPU off the bus, a driver that must reload.
- rma:    drain and replace the hardware; the vendor's RMA criteria are met.

Most checks mean one thing per status, so one table maps (check ID, status) to both: `TABLE`, built from the rows
each family declares beside its checks (gpudiag/checks/family.py) and shown whole in docs/reference/verdicts.md.
A check whose results of one status call for different actions sets them itself (`with_verdict`, e.g. kernel-log
findings by Xid); `assign` leaves those alone. A check or status the table does not list gets the status's default
and a code derived from its ID, so that every non-pass result carries both.
"""

from __future__ import annotations

from typing import Optional

from gpudiag.model import CheckResult, Status

ACTIONS = ("none", "watch", "drain", "reset", "reboot", "rma")
ACTION_RANK = {action: rank for rank, action in enumerate(ACTIONS)}

# For a status the table does not list (pass and skip need nothing: `assign` sets "none" before looking here).
_DEFAULT_ACTION = {Status.WARN: "watch", Status.UNKNOWN: "watch", Status.FAIL: "drain"}

# check ID -> {status: (action, fault code)}, every check in checklist order: filled once, from the rows each family
# declares beside its checks, by gpudiag/checks/__init__.py (which runs before any module of the package can be
# used; this module cannot import the families, which import it).
TABLE: dict[str, dict[Status, tuple[str, str]]] = {}

# A GPU that stopped answering its library (checks.common.unreachable), whatever the check was: a hung one is reset;
# one that is lost (fell off the bus: NVML_ERROR_GPU_IS_LOST, Xid 79) needs the node power-cycled, as Xid 79's own
# verdict says (checks/kernel_log/xid_catalog.py): one action for the loss, whichever result says it.
UNREACHABLE = ("reset", "GPUDIAG-GPU-UNREACHABLE")
LOST = ("reboot", UNREACHABLE[1])
# A check that raised (a gpudiag bug, checks/__init__.py): `unknown` like a device that did not answer, but with this
# fault code, so that automation and the tests can tell the two apart.
INTERNAL_ERROR = ("watch", "GPUDIAG-INTERNAL-ERROR")


def is_internal_error(result: CheckResult) -> bool:
    """True for the result of a check that raised, as opposed to a device or call that failed."""
    return result.fault_code == INTERNAL_ERROR[1]


def derived_code(check_id: str, status: Status) -> str:
    """`ecc.uncorrected` + unknown → `GPUDIAG-ECC-UNCORRECTED-UNKNOWN`."""
    return f"GPUDIAG-{check_id.upper().replace('.', '-').replace('_', '-')}-{status.value.upper()}"


def with_verdict(result: CheckResult, action: str, fault_code: str) -> CheckResult:
    """Set a result's own verdict (a check that knows better than the table)."""
    if action not in ACTION_RANK:
        raise ValueError(f"unknown action {action!r}")
    result.action, result.fault_code = action, fault_code
    return result


def assign(result: CheckResult) -> CheckResult:
    """Fill in `action` and `fault_code` where the check did not set them."""
    if result.action is not None:
        return result
    if result.status in (Status.PASS, Status.SKIP):
        result.action, result.fault_code = "none", None
        return result
    action, code = TABLE.get(result.check, {}).get(result.status) or (
        _DEFAULT_ACTION[result.status], derived_code(result.check, result.status))
    result.action, result.fault_code = action, code
    return result


def strongest(actions: list[Optional[str]]) -> str:
    """The action that covers all of `actions` (a node with one GPU to reset and one to watch: reset)."""
    return max((a for a in actions if a is not None), key=ACTION_RANK.__getitem__, default="none")
