"""Tuners: search a task's ConfigSpace for the fastest config (AutoTVM's tuner family).

Configs are numbered (ConfigSpace.get / index_of). Every tuner proposes batches of configs it
has not measured yet and learns from measured throughputs (FLOP/s; 0 for a failed config):

    random  uniform without replacement;
    grid    in index order;
    ga      genetic: a population of `pop_size`, parents drawn in proportion to throughput,
            uniform crossover of knob values, each knob mutated with probability 0.1,
            the `elite` best carried over (AutoTVM's GATuner);
    xgb     XGBoost ranking model (objective rank:pairwise) on the features of the lowered kernel,
            CPU or GPU (tvmc.autotune.features: loops and their kinds or thread bindings, memory
            accesses by scope, launch extents), retrained after every batch; batches are
            proposed by simulated annealing over the knob space on the model's scores (parallel
            chains, one knob changed per step, temperature falling linearly to 0), the best
            unmeasured points kept; 5% of each batch is random (exploration). With prior
            records (`add_prior`), a base model is trained on them (each prior task its own
            ranking group) and proposes the first batches; the task's own model is then trained
            on the task's measurements only, starting from the base model's margin scaled by a
            discount that falls linearly from 1 to 0 over `transfer_trials` own measurements
            (AutoTVM's XGBoostCostModel with a base model): the priors steer the start, the
            task's own data decides once there is enough of it.
"""

from __future__ import annotations

import heapq
import math
import time

import numpy as np

from tvmc.errors import TuningError


class Tuner:
    """Base: `next_batch(n)` proposes, `update(indices, flops)` learns, `tune` runs the loop."""

    def __init__(self, space, seed: int = 0):
        self.space = space
        self.size = len(space)
        self.dims = space.dims
        self.rng = np.random.default_rng(seed)
        self.visited: set = set()
        self.xs: list = []
        self.ys: list = []
        self.best_flops = 0.0
        self.best_index = None
        self.trials = 0          # measurements made by `tune` (resumed ones not counted)
        self.best_trial = 0

    # -- knob vector <-> flat index
    def to_vec(self, index: int) -> list:
        out = []
        for d in reversed(self.dims):
            index, k = divmod(index, d)
            out.append(k)
        return out[::-1]

    def to_index(self, vec) -> int:
        index = 0
        for k, d in zip(vec, self.dims):
            index = index * d + int(k)
        return index

    def has_next(self) -> bool:
        return len(self.visited) < self.size

    def next_batch(self, n: int) -> list:
        raise NotImplementedError

    def _random_unvisited(self, n: int) -> list:
        out: list = []
        if self.size - len(self.visited) <= 4 * n or self.size <= 4096:
            free = [i for i in range(self.size) if i not in self.visited]
            self.rng.shuffle(free)
            return free[:n]
        while len(out) < n:
            i = int(self.rng.integers(self.size))
            if i not in self.visited and i not in out:
                out.append(i)
        return out

    def update(self, indices, flops) -> None:
        """Learn measured throughputs (FLOP/s, 0 for failures) of config numbers `indices`."""
        for j, (i, f) in enumerate(zip(indices, flops)):
            self.visited.add(i)
            self.xs.append(i)
            self.ys.append(float(f))
            if f > self.best_flops:
                self.best_flops, self.best_index, self.best_trial = float(f), i, self.trials + j

    def tune(self, n_trial: int, measure, batch_size: int = 8, early_stopping: int | None = None,
             callback=None) -> None:
        """Measure up to `n_trial` new configs: `measure(list[ConfigEntity]) -> list[FLOP/s]`.
        Stops early once `early_stopping` trials have passed since the best one; `callback(tuner,
        indices, flops)` runs after each batch."""
        while self.trials < n_trial and self.has_next():
            if early_stopping and self.best_index is not None and self.trials - self.best_trial >= early_stopping:
                break
            batch = self.next_batch(min(batch_size, n_trial - self.trials))
            if not batch:
                break
            flops = measure([self.space.get(i) for i in batch])
            self.update(batch, flops)
            self.trials += len(batch)
            if callback:
                callback(self, batch, flops)


class RandomTuner(Tuner):
    def next_batch(self, n):
        return self._random_unvisited(n)


class GridTuner(Tuner):
    def __init__(self, space, seed=0):
        super().__init__(space, seed)
        self._next = 0

    def next_batch(self, n):
        out = []
        while len(out) < n and self._next < self.size:
            if self._next not in self.visited:
                out.append(self._next)
            self._next += 1
        return out


class GATuner(Tuner):
    def __init__(self, space, seed=0, pop_size: int = 32, elite: int = 3, mutation_prob: float = 0.1):
        super().__init__(space, seed)
        self.pop_size = max(2, min(pop_size, self.size))
        self.elite = min(elite, self.pop_size)
        self.mutation_prob = mutation_prob
        self.queue: list = []
        self.population: list = []   # (index, flops) of the current generation

    def next_batch(self, n):
        if not self.queue:
            self.queue = self._next_generation()
        out = [i for i in self.queue if i not in self.visited][:n]
        self.queue = [i for i in self.queue if i not in out and i not in self.visited]
        if len(out) < n:
            out += [i for i in self._random_unvisited(n - len(out)) if i not in out]
        return out

    def _next_generation(self) -> list:
        measured = list(zip(self.xs, self.ys))
        if len(measured) < 2:
            return self._random_unvisited(self.pop_size)
        # the population: the best pop_size measured so far (AutoTVM keeps the last generation;
        # keeping the best is the same once the elite dominates, and robust to resumed records)
        pop = heapq.nlargest(self.pop_size, measured, key=lambda p: p[1])
        idx = [p[0] for p in pop]
        fit = np.array([p[1] for p in pop], np.float64)
        prob = fit / fit.sum() if fit.sum() > 0 else np.full(len(fit), 1 / len(fit))
        children: list = []
        tries = 0
        while len(children) < self.pop_size - self.elite and tries < 20 * self.pop_size:
            tries += 1
            a, b = self.rng.choice(len(idx), 2, p=prob)
            va, vb = self.to_vec(idx[a]), self.to_vec(idx[b])
            child = [va[k] if self.rng.random() < 0.5 else vb[k] for k in range(len(va))]
            for k, d in enumerate(self.dims):
                if self.rng.random() < self.mutation_prob:
                    child[k] = int(self.rng.integers(d))
            c = self.to_index(child)
            if c not in self.visited and c not in children:
                children.append(c)
        return children or self._random_unvisited(self.pop_size)


class XGBTuner(Tuner):
    """See the module docstring. `featurize(config) -> np.ndarray` gives a config's features;
    `featurize_many(configs) -> list of np.ndarray`, when given, several at once (in parallel
    processes: each lowers its kernel, the annealing's main cost)."""

    def __init__(self, space, featurize, seed=0, num_rounds: int = 60, sa_chains: int = 16, sa_steps: int = 60,
                 epsilon: float = 0.05, transfer_trials: int = 32, featurize_many=None):
        super().__init__(space, seed)
        self.featurize = featurize
        self.featurize_many = featurize_many
        self.num_rounds, self.sa_chains, self.sa_steps, self.epsilon = num_rounds, sa_chains, sa_steps, epsilon
        self.transfer_trials = transfer_trials
        self.cache: dict = {}
        self.prior: list = []       # (features [n, F], labels [n]) per prior task
        self.base = None            # model of the prior records
        self.model = None           # model of this task's measurements (on the base margin)
        self.discount = 0.0         # weight of the base margin in `model`
        self.fit_s = 0.0

    def features(self, indices) -> np.ndarray:
        missing = list(dict.fromkeys(i for i in indices if i not in self.cache))
        if self.featurize_many is not None and len(missing) > 1:
            for i, vec in zip(missing, self.featurize_many([self.space.get(i) for i in missing])):
                self.cache[i] = vec
        for i in missing:
            if i not in self.cache:
                self.cache[i] = self.featurize(self.space.get(i))
        return np.stack([self.cache[i] for i in indices])

    def add_prior(self, features: np.ndarray, flops) -> None:
        """Measurements of another task (features, FLOP/s) the model starts from."""
        flops = np.asarray(flops, np.float64)
        if len(flops) >= 2 and flops.max() > 0:
            self.prior.append((np.asarray(features, np.float32), flops / flops.max()))

    def _train(self, groups, base_margin=None):
        import xgboost as xgb

        x = np.concatenate([g[0] for g in groups])
        dm = xgb.DMatrix(x, label=np.concatenate([g[1] for g in groups]))
        dm.set_group([len(g[1]) for g in groups])
        if base_margin is not None:
            dm.set_base_margin(base_margin)
        params = {"objective": "rank:pairwise", "max_depth": 6, "eta": 0.3, "gamma": 1e-4,
                  "min_child_weight": 1, "subsample": 1.0, "verbosity": 0, "nthread": 1,
                  "seed": int(self.rng.integers(1 << 30))}
        return xgb.train(params, dm, self.num_rounds)

    def _base_margin(self, x):
        import xgboost as xgb

        return self.base.predict(xgb.DMatrix(x), output_margin=True)

    def fit(self) -> None:
        t0 = time.perf_counter()
        if self.base is None and self.prior:
            self.base = self._train(self.prior)
        ys = np.asarray(self.ys, np.float64)
        if len(ys) >= 2 and ys.max() > 0:
            x = self.features(self.xs)
            self.discount = max(0.0, 1.0 - len(ys) / self.transfer_trials) if self.base is not None else 0.0
            margin = self.discount * self._base_margin(x) if self.discount > 0 else None
            self.model = self._train([(x, ys / ys.max())], margin)
        self.fit_s += time.perf_counter() - t0

    def predict(self, indices) -> np.ndarray:
        import xgboost as xgb

        x = self.features(indices)
        if self.model is None:
            return self._base_margin(x)
        dm = xgb.DMatrix(x)
        if self.discount > 0:
            dm.set_base_margin(self.discount * self._base_margin(x))
        return self.model.predict(dm, output_margin=True)

    def update(self, indices, flops):
        super().update(indices, flops)
        self.fit()

    def next_batch(self, n):
        if self.base is None and self.prior:
            self.fit()
        if self.model is None and self.base is None:
            return self._random_unvisited(n)
        n_random = int(math.floor(n * self.epsilon)) if n >= 1 / self.epsilon else 0
        picks = self._anneal(n - n_random)
        picks += [i for i in self._random_unvisited(n) if i not in picks][:n - len(picks)]
        return picks

    def _anneal(self, n: int) -> list:
        """Simulated annealing on the model's scores; returns up to `n` unvisited config numbers
        of the highest score found."""
        if n <= 0:
            return []
        chains = min(self.sa_chains, self.size)
        starts = self._random_unvisited(chains)
        if self.best_index is not None:
            starts = [self.best_index] + starts[:chains - 1]
        if not starts:
            return []
        points = list(starts)
        scores = self.predict(points)
        best: dict = {}
        for p, s in zip(points, scores):
            if p not in self.visited:
                best[p] = s
        for step in range(self.sa_steps):
            temp = 1.0 - step / self.sa_steps
            cand = []
            for p in points:
                v = self.to_vec(p)
                k = int(self.rng.integers(len(v)))
                if self.dims[k] > 1:
                    v[k] = (v[k] + 1 + int(self.rng.integers(self.dims[k] - 1))) % self.dims[k]
                cand.append(self.to_index(v))
            cscores = self.predict(cand)
            for j, (c, cs) in enumerate(zip(cand, cscores)):
                if c not in self.visited:
                    best[c] = cs
                if cs >= scores[j] or self.rng.random() < math.exp((cs - scores[j]) / max(temp, 1e-9)):
                    points[j], scores[j] = c, cs
            if len(self.cache) >= self.size:  # every point scored: annealing cannot find more
                break
        if len(self.cache) >= self.size:
            free = [i for i in range(self.size) if i not in self.visited]
            best = dict(zip(free, self.predict(free))) if free else {}
        return [i for i, _ in heapq.nlargest(n, best.items(), key=lambda kv: kv[1])]


TUNERS = ("xgb", "ga", "random", "grid")


def make_tuner(kind: str, space, featurize=None, seed: int = 0, featurize_many=None) -> Tuner:
    """A tuner by name (TUNERS); xgb needs `featurize` (and takes `featurize_many`, see
    XGBTuner). Raises TuningError on an unknown name."""
    if kind == "random":
        return RandomTuner(space, seed)
    if kind == "grid":
        return GridTuner(space, seed)
    if kind == "ga":
        return GATuner(space, seed)
    if kind == "xgb":
        return XGBTuner(space, featurize, seed, featurize_many=featurize_many)
    raise TuningError(f"unknown tuner '{kind}'; known: {', '.join(TUNERS)}")
