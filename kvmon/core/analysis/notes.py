"""What an analysis step says of its numbers: where each came from and why an unknown one is unknown."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kvmon.core.readings import Provenance


@dataclass(frozen=True)
class Notes:
    """One step's ``provenance`` and ``reasons`` by field; ``withdrawn``: provenances of earlier steps it takes back."""

    provenance: Mapping[str, Provenance] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)
    withdrawn: frozenset[str] = frozenset()

    def then(self, *later: Notes) -> Notes:
        """These notes followed by ``later``'s in order: a later step's word on a field wins."""
        prov, reasons = dict(self.provenance), dict(self.reasons)
        for n in later:
            for key in n.withdrawn:
                prov.pop(key, None)
            prov.update(n.provenance)
            reasons.update(n.reasons)
        return Notes(prov, reasons)
