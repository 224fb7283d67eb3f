"""Group-relative policy-gradient search over a knob space (GRPO-style), pure and seeded.

The policy is one categorical distribution per knob (softmax of its logits, all zero at
the start: uniform). Each round samples a group of configs from it; each config's reward
is its speed (1 / its judged time) when the contract holds for it, and 0 (below any speed)
when it does not; a config's advantage is its reward minus the group's mean, over the
group's standard deviation. Each knob's logits then move by the learning rate times the
mean over the group of advantage x (one-hot of the value taken - the knob's probabilities),
the gradient of the log-probability: values of fast passing configs gain mass, values of
slow or failing ones lose it.

Each config is evaluated once (``Evaluator`` results are cached: a re-sample costs
nothing and reads the same numbers, so a run replays). The choice is never the policy's:
it is the fastest config that the contract verified, among all evaluated; a config that
failed is never a candidate, however fast.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Config = tuple[int, ...]  # one value index per knob


@dataclass(frozen=True)
class Evaluation:
    """What the judge measured for one config."""

    passed: bool  # the contract (the screening gates) holds for it
    time_ms: float | None  # judged median at the reference shape (None: not measured)

    @property
    def reward(self) -> float:
        """Speed for a passing config with a time; 0 (the lowest) for anything else."""
        if not self.passed or self.time_ms is None or not self.time_ms > 0:
            return 0.0
        return 1.0 / self.time_ms


Evaluator = Callable[[Config], Evaluation]


@dataclass
class Policy:
    """One categorical distribution per knob, as logits."""

    logits: list[list[float]]

    @classmethod
    def uniform(cls, sizes: Sequence[int]) -> Policy:
        return cls([[0.0] * n for n in sizes])

    def probabilities(self) -> list[list[float]]:
        out = []
        for row in self.logits:
            top = max(row)
            weights = [math.exp(v - top) for v in row]
            total = sum(weights)
            out.append([w / total for w in weights])
        return out

    def sample(self, rng: random.Random) -> Config:
        return tuple(rng.choices(range(len(p)), weights=p)[0] for p in self.probabilities())

    def update(self, group: Sequence[Config], advantages: Sequence[float], rate: float) -> None:
        """One policy-gradient step: logits += rate * mean(A * (onehot - p))."""
        probabilities = self.probabilities()
        for k, p in enumerate(probabilities):
            for v in range(len(p)):
                gradient = statistics.fmean(
                    a * ((1.0 if config[k] == v else 0.0) - p[v])
                    for config, a in zip(group, advantages)
                )
                self.logits[k][v] += rate * gradient


def advantages(rewards: Sequence[float]) -> list[float]:
    """Group-relative advantages: (reward - group mean) / group std (0s for a flat group)."""
    mean = statistics.fmean(rewards)
    spread = statistics.pstdev(rewards)
    if spread <= 1e-12 * max(1.0, abs(mean)):
        return [0.0] * len(rewards)
    return [(r - mean) / spread for r in rewards]


@dataclass
class Round:
    """One round of the search: the group sampled, its advantages, the policy after."""

    group: list[Config]
    rewards: list[float]
    advantages: list[float]
    probabilities: list[list[float]]  # after the update


@dataclass
class SearchResult:
    evaluated: dict[Config, Evaluation]
    order: list[Config]  # configs in the order they were first evaluated
    rounds: list[Round] = field(default_factory=list)

    def ranked(self, excluded: set[Config] | frozenset[Config] = frozenset()) -> list[Config]:
        """Passing, timed configs, fastest first (ties: the one evaluated first)."""
        passing = [
            c
            for c in self.order
            if c not in excluded and self.evaluated[c].passed and self.evaluated[c].reward > 0
        ]
        return sorted(passing, key=lambda c: (self.evaluated[c].time_ms, self.order.index(c)))


def grpo_search(
    sizes: Sequence[int],
    evaluate: Evaluator,
    *,
    rounds: int,
    group: int,
    seed: int,
    rate: float = 1.0,
    max_evaluations: int | None = None,
    on_evaluated: Callable[[Config, Evaluation], None] | None = None,
) -> SearchResult:
    """Run the search (see the module). ``max_evaluations`` caps the distinct configs
    evaluated: once reached, samples of new configs are dropped from their group and the
    search goes on over the configs already measured (their numbers are cached)."""
    rng = random.Random(seed)
    policy = Policy.uniform(sizes)
    result = SearchResult(evaluated={}, order=[])
    for _ in range(rounds):
        sampled = [policy.sample(rng) for _ in range(group)]
        members = []
        for config in sampled:
            if config not in result.evaluated:
                if max_evaluations is not None and len(result.order) >= max_evaluations:
                    continue
                evaluation = evaluate(config)
                result.evaluated[config] = evaluation
                result.order.append(config)
                if on_evaluated is not None:
                    on_evaluated(config, evaluation)
            members.append(config)
        if not members:
            continue
        rewards = [result.evaluated[c].reward for c in members]
        advantage = advantages(rewards)
        policy.update(members, advantage, rate)
        result.rounds.append(Round(members, rewards, advantage, policy.probabilities()))
    return result
