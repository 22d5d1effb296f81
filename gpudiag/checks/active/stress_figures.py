"""What a stress run's telemetry says, reduced to the figures the active.stress check judges and the outputs show:
the steady window (the load after the clocks, power and temperature have ramped), its mean power and SM clocks,
the peak temperature, the throttle reasons seen, and the node median of each figure over identical GPUs."""

from __future__ import annotations

from dataclasses import field
from typing import Optional

from gpudiag.model import StressResult, TelemetrySample
from gpudiag.model.records import dataclass

# The first part of a run is the ramp: clocks boost, power climbs for a few seconds while the GPU heats up and the
# power controller settles (seen on the lab H200: ~2 s to the cap). The steady window starts at 20 % of the run, and
# no earlier than 3 s, when the run is long enough to have one.
STEADY_START_FRACTION = 0.2
STEADY_START_MIN_SECONDS = 3.0


def steady_samples(samples: list[TelemetrySample]) -> list[TelemetrySample]:
    if not samples:
        return []
    span = samples[-1].seconds
    start = max(STEADY_START_FRACTION * span, min(STEADY_START_MIN_SECONDS, 0.5 * span))
    steady = [s for s in samples if s.seconds >= start]
    return steady or samples[-1:]


def _values(samples: list[TelemetrySample], name: str) -> list[float]:
    return [getattr(s, name) for s in samples if getattr(s, name) is not None]


@dataclass
class StressFigures:
    """The figures of one GPU's stress run that the stress checks judge."""
    tflops: Optional[float] = None
    precision: Optional[str] = None
    mean_power_watts: Optional[float] = None  # over the steady window
    power_limit_watts: Optional[float] = None  # the enforced limit (lowest seen while loaded)
    sm_clock_min_mhz: Optional[int] = None  # over the steady window
    sm_clock_median_mhz: Optional[float] = None
    start_temperature_celsius: Optional[float] = None
    max_temperature_celsius: Optional[float] = None
    max_power_watts: Optional[float] = None
    throttle_reasons: list[str] = field(default_factory=list)  # every reason seen during the load
    steady_samples: int = 0

    @property
    def power_ratio(self) -> Optional[float]:
        if self.mean_power_watts is None or not self.power_limit_watts:
            return None
        return self.mean_power_watts / self.power_limit_watts


def figures_of(stress: StressResult) -> StressFigures:
    steady = steady_samples(stress.samples)
    powers, clocks = _values(steady, "power_watts"), _values(steady, "sm_clock_mhz")
    limits = _values(stress.samples, "power_limit_watts")
    temperatures = _values(stress.samples, "temperature_celsius")
    all_powers = _values(stress.samples, "power_watts")
    # here, not at import: only a --level 2|3 check has stress figures; importing statistics (with decimal and
    # fractions) costs a few ms
    import statistics

    return StressFigures(
        tflops=stress.tflops if stress.tflops is not None else stress.fp32_tflops,
        precision=stress.precision or ("fp32" if stress.fp32_tflops is not None else None),
        mean_power_watts=round(statistics.fmean(powers), 1) if powers else None,
        power_limit_watts=min(limits) if limits else None,
        sm_clock_min_mhz=min(clocks) if clocks else None,
        sm_clock_median_mhz=statistics.median(clocks) if clocks else None,
        start_temperature_celsius=temperatures[0] if temperatures else None,
        max_temperature_celsius=max(temperatures) if temperatures else None,
        max_power_watts=max(all_powers) if all_powers else None,
        throttle_reasons=sorted({r for s in stress.samples for r in (s.throttle_reasons or [])}),
        steady_samples=len(steady),
    )


def median_of(values: list[Optional[float]]) -> Optional[float]:
    import statistics  # as in figures_of

    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None
