"""Every built-in scenario by name, single-model (``kvmon.sim.scenarios``) and router / llama-swap
(``kvmon.sim.multi_scenarios``): the one list the command line checks names against and prints in its help."""

from __future__ import annotations

import shutil
import textwrap

from kvmon.sim.multi_scenarios import MULTI_SCENARIOS, MultiScenario
from kvmon.sim.scenarios import SCENARIOS, KeyMoment, Scenario

_ALL: dict[str, Scenario | MultiScenario] = {**SCENARIOS, **MULTI_SCENARIOS}


def descriptions() -> dict[str, str]:
    """Each scenario's name and its description, in the order the help lists them."""
    return {n: s.description for n, s in _ALL.items()}


def key_moments(name: str) -> tuple[KeyMoment, ...]:
    """The scenario's key moments, in time order (none for a name that is not built in)."""
    scenario = _ALL.get(name)
    return tuple(sorted(scenario.key_moments, key=lambda m: m.at_s)) if scenario else ()


def names() -> tuple[str, ...]:
    return tuple(descriptions())


def check(name: str) -> str:
    """``name`` when it is a built-in scenario; ValueError listing all the known ones otherwise."""
    if name not in descriptions():
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(names())}")
    return name


def scenarios_help(width: int | None = None) -> str:
    """Every scenario with its whole description, wrapped to ``width`` (the terminal's when None) under its name:
    the end of ``kvmon --help`` (for --demo) and of ``kvmon sim --help``."""
    width = width or shutil.get_terminal_size((100, 24)).columns
    width = max(40, width - 2)  # argparse's own margin
    items = descriptions()
    pad = max(len(n) for n in items) + 4
    lines = ["scenarios:"]
    for name, text in items.items():
        text = " ".join(text.split())
        if moments := key_moments(name):  # a time is never parted from its unit at a line's end
            text += ". Key moments: " + ", ".join(f"{m.at_s:g}\u00a0s {m.name}" for m in moments)
        if width - pad >= 30:  # the description beside the name, its later lines under the first
            lines += textwrap.wrap(text, width, initial_indent=f"  {name:<{pad - 2}}", subsequent_indent=" " * pad,
                                   break_on_hyphens=False)
        else:  # too narrow: the name on its own line, the description under it
            lines.append(f"  {name}")
            lines += textwrap.wrap(text, width, initial_indent="      ", subsequent_indent="      ",
                                   break_on_hyphens=False)
    lines += ["", *textwrap.wrap("Key moments are in simulated seconds: --start-at T joins a scenario there (kvmon "
                                 "--demo S --start-at T, kvmon once --demo S --start-at T, kvmon screenshot --demo S "
                                 "--start-at T), and --speed X plays it X times as fast.", width)]
    return "\n".join(lines)
