"""Metric families and the Prometheus text exposition format (version 0.0.4)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = dict[str, str]


@dataclass
class Sample:
    """One value; ``suffix`` is ``_bucket``/``_sum``/``_count`` for histogram parts."""

    labels: Labels
    value: float
    suffix: str = ""


@dataclass
class MetricFamily:
    """A named metric with its type, help text and samples."""

    name: str
    type: str  # gauge | counter | histogram
    help: str
    samples: list[Sample] = field(default_factory=list)

    def add(self, value: float, **labels: Any) -> "MetricFamily":
        self.samples.append(Sample({k: str(v) for k, v in labels.items()}, float(value)))
        return self

    def add_histogram(self, buckets: list[tuple[float, int]], count: int, total: float,
                      **labels: Any) -> "MetricFamily":
        """Cumulative ``buckets`` as (upper bound, count), ending with +Inf."""
        base = {k: str(v) for k, v in labels.items()}
        for bound, n in buckets:
            # "1.0", not "1": the bucket labels Prometheus' own clients write
            le = "+Inf" if math.isinf(bound) else repr(float(bound))
            self.samples.append(Sample({**base, "le": le}, n, "_bucket"))
        self.samples.append(Sample(base, total, "_sum"))
        self.samples.append(Sample(base, count, "_count"))
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "help": self.help,
                "samples": [{"name": self.name + s.suffix, "labels": s.labels,
                             "value": s.value} for s in self.samples]}


def format_value(value: float) -> str:
    """Integers without a fraction, infinities as Prometheus spells them."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def render(families: list[MetricFamily]) -> str:
    """The text exposition of ``families`` (HELP, TYPE, then one line per sample)."""
    lines: list[str] = []
    for fam in families:
        lines.append(f"# HELP {fam.name} {_help(fam.help)}")
        lines.append(f"# TYPE {fam.name} {fam.type}")
        for s in fam.samples:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels.items())
            lines.append(f"{fam.name}{s.suffix}{{{labels}}} {format_value(s.value)}"
                         if labels else f"{fam.name}{s.suffix} {format_value(s.value)}")
    return "\n".join(lines) + "\n"
