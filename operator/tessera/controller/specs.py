"""The one reader of a Workload's spec in the shell: parsed by the api models, and a spec they
refuse (admission let it through) said in status and an event, naming the field."""

from __future__ import annotations

from datetime import datetime

from pydantic import ValidationError

from tessera import api
from tessera.controller.events import Events
from tessera.controller.writes import Writes
from tessera.world.facts import ObjectFacts, validation_message
from tessera.world.status import invalid_spec_status


def parse_spec(
    facts: ObjectFacts, now: datetime, writes: Writes, events: Events
) -> api.WorkloadSpec | None:
    """The parsed spec, or None after saying in status and an event which field is wrong."""
    try:
        return api.WorkloadSpec.model_validate(facts.spec)
    except ValidationError as err:
        message = validation_message(err)
        if facts.status.get("message") != message:
            writes.status(facts, invalid_spec_status(facts, message, now), guard=False)
            events.post(facts, "Workload", "InvalidSpec", message, warning=True)
        return None
