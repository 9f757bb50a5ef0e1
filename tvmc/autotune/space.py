"""Config spaces: the knobs a schedule reads (`cfg["tile_ow"]`), their candidates and fallback values."""

from __future__ import annotations

import itertools


class ConfigSpace:
    """Knobs of one implementation on one workload (AutoTVM's ConfigSpace).

    `define_knob(name, candidates)` declares a knob; `define_split(name, extent, max_factor)`
    declares a tile size among the divisors of `extent`. `fallback` holds the values the
    schedule's documented heuristic picks without tuning records.
    """

    def __init__(self):
        self.knobs: dict = {}
        self.fallback: dict = {}

    def define_knob(self, name: str, candidates, fallback):
        self.knobs[name] = list(candidates)
        if fallback not in self.knobs[name]:
            self.knobs[name].append(fallback)
        self.fallback[name] = fallback

    def define_split(self, name: str, extent: int, fallback: int, max_factor: int = 64):
        cands = [f for f in range(1, min(extent, max_factor) + 1) if extent % f == 0]
        self.define_knob(name, cands, fallback if extent % fallback == 0 else _largest_divisor(extent, fallback))

    def __len__(self):
        n = 1
        for c in self.knobs.values():
            n *= len(c)
        return n

    def fallback_config(self) -> "ConfigEntity":
        return ConfigEntity(self.fallback, is_fallback=True)

    @property
    def dims(self) -> list:
        """Number of candidates per knob, in declaration order."""
        return [len(c) for c in self.knobs.values()]

    def get(self, index: int) -> "ConfigEntity":
        """Config number `index` in [0, len(self)) (mixed radix over the knobs, the last knob
        varying fastest: the order of all_configs)."""
        values = {}
        for name in reversed(list(self.knobs)):
            cands = self.knobs[name]
            index, k = divmod(index, len(cands))
            values[name] = cands[k]
        return ConfigEntity({n: values[n] for n in self.knobs})

    def index_of(self, config) -> int | None:
        """Inverse of `get`; None when `config` is not a point of this space."""
        index = 0
        for name, cands in self.knobs.items():
            if name not in config or config[name] not in cands or len(config) != len(self.knobs):
                return None
            index = index * len(cands) + cands.index(config[name])
        return index

    def all_configs(self):
        names = list(self.knobs)
        for values in itertools.product(*(self.knobs[n] for n in names)):
            yield ConfigEntity(dict(zip(names, values)))


class ConfigEntity(dict):
    """One point of a ConfigSpace: knob name -> value."""

    def __init__(self, values, is_fallback=False):
        super().__init__(values)
        self.is_fallback = is_fallback


def _largest_divisor(extent: int, at_most: int) -> int:
    for f in range(min(extent, at_most), 0, -1):
        if extent % f == 0:
            return f
    return 1
