"""What the read-only commands infer from the live cluster without the operator's flags:
the unit reference the operator counts against, read back from the pools' status."""

from __future__ import annotations

from typing import Any

from tessera import catalog
from tessera.cli.live import unit_reference
from tessera.world.facts import ObjectFacts, object_facts


def pool(name: str, model: str, units: float | None, **accelerator: Any) -> ObjectFacts:
    status = {"accelerator": {"model": model, "unitsPerDevice": units}} if units else {}
    return object_facts(
        {
            "metadata": {"name": name, "uid": name, "resourceVersion": "1", "generation": 1},
            "spec": {"accelerator": {"vendor": "nvidia", **accelerator}},
            "status": status,
        }
    )


def units(model: str, reference: str) -> float:
    entry, base = catalog.get(model), catalog.get(reference)
    assert entry and base
    return round(
        catalog.dense_tflops(entry.peak_tflops) / catalog.dense_tflops(base.peak_tflops), 4
    )


def same_units(found: str, reference: str) -> bool:
    """Models of one dense throughput (the two A100s) count the same units."""
    return units(found, reference) == 1.0


def test_the_reference_is_the_model_under_which_every_pools_units_hold() -> None:
    models = ("H100-SXM5-80GB", "A100-SXM4-80GB", "L4")
    for reference in ("A100-SXM4-80GB", "B200", "L4", catalog.REFERENCE_MODEL):
        pools = [pool(m, m, units(m, reference)) for m in models]
        assert same_units(unit_reference(pools), reference), reference
    assert unit_reference([pool("h", "H100-SXM5-80GB", 1.0)]) == catalog.REFERENCE_MODEL


def test_pools_with_their_own_figures_or_no_status_say_nothing() -> None:
    a100 = "A100-SXM4-80GB"
    own = [
        pool("fixed", "H100-SXM5-80GB", 0.5, unitsPerDevice=0.5),
        pool("faster", "H100-SXM5-80GB", 0.7, peakTFLOPS={"bf16": 700}),
        pool("new", "H100-SXM5-80GB", None),
    ]
    assert unit_reference(own) == catalog.REFERENCE_MODEL
    assert same_units(unit_reference([*own, pool("l4", "L4", units("L4", a100))]), a100)
    assert unit_reference([pool("odd", "L4", 0.123456)]) == catalog.REFERENCE_MODEL
