"""MLPerf datasets' token lengths, as distributions the simulator draws requests from.

The MLCommons inference repository states output means but no input means for
these datasets (sim/published.py). The per-sample counts are public elsewhere:
openshift-psap/performance-dashboard @71007029fb5bced1d79808e7e64dc4c2af82ea55,
mlperf-data/summaries/*.csv, extracted by that project from the official dataset
files (its mlperf-data/original/generate_dataset_summaries.py: ``tok_input_len``
of mlperf_deepseek_r1_dataset_4388_fp8_eval.pkl and of the Llama-3.1-405B set,
``len(tok_input)`` of cnn_eval.json, ``tok_input_length`` of OpenOrca's 24,576
samples). Its 405B figures agree with AMD's MLPerf v5.1 blog (ROCm/rocm-blogs
blogs/artificial-intelligence/mlperf-inference-v5.1/README.md @6a35541: "input
sequence lengths range from 476 to 19988 tokens with an average of 9428").

Each table holds a dataset's 0th, 1st, ..., 100th percentiles (each a sample's own
value; benchmarks/mlperf_length_table.py prints them from the CSVs). A draw picks a
uniform percentile and interpolates linearly between the two neighbours: the
distribution's shape, tail included, without shipping 50,000 samples.

Outputs: a benchmark's engines generate their own answers, whose mean is what a
published run's log shows (``DatasetLengths.osl_observed``: tokens/s over
samples/s), not the reference answers'. Where the summaries hold the reference
answers' token counts (DeepSeek-R1, Llama-3.1-405B, Llama-2-70B), outputs are drawn
from that shape, capped at the benchmark's maximum and scaled so that the capped
draws average the requested mean; Llama-3.1-8B's summary estimates outputs from
characters, so its outputs are the mean itself (the benchmark caps them at 128
tokens anyway).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

_DEEPSEEK_R1_IN = (
    52, 73, 82, 89, 94, 100, 105, 110, 114, 120, 124, 129, 135, 141, 147, 155, 164, 178, 190, 205, 231, 292, 346,
    389, 430, 479, 541, 600, 678, 721, 759, 792, 820, 834, 841, 846, 850, 853, 857, 860, 865, 869, 872, 876, 880,
    884, 887, 890, 893, 898, 901, 906, 909, 912, 917, 922, 926, 933, 939, 945, 952, 958, 965, 974, 981, 990,
    1000, 1010, 1021, 1027, 1037, 1047, 1057, 1069, 1078, 1088, 1098, 1109, 1119, 1132, 1141, 1151, 1164, 1176,
    1194, 1212, 1238, 1262, 1270, 1276, 1281, 1286, 1291, 1298, 1303, 1312, 1321, 1334, 1359, 1432, 3140,
)
_DEEPSEEK_R1_OUT = (
    209, 353, 400, 447, 471, 502, 526, 552, 578, 601, 626, 645, 670, 692, 718, 736, 759, 789, 812, 839, 867, 897,
    917, 940, 969, 996, 1036, 1069, 1098, 1124, 1157, 1194, 1240, 1288, 1319, 1363, 1396, 1442, 1503, 1542, 1598,
    1646, 1688, 1756, 1815, 1883, 1940, 2003, 2058, 2130, 2192, 2277, 2356, 2436, 2521, 2607, 2676, 2772, 2861,
    2930, 3038, 3122, 3235, 3335, 3446, 3583, 3688, 3806, 3967, 4086, 4217, 4337, 4487, 4619, 4757, 4912, 5094,
    5269, 5461, 5716, 5950, 6208, 6485, 6838, 7103, 7419, 7725, 8216, 8674, 9054, 9490, 10321, 10941, 11816,
    12900, 13859, 15559, 17271, 19261, 32768, 32768,
)
_LLAMA3_1_405B_IN = (
    476, 1597, 2033, 2345, 2590, 2782, 2949, 3134, 3317, 3503, 3677, 3811, 3972, 4107, 4242, 4365, 4528, 4678,
    4819, 4972, 5122, 5294, 5478, 5658, 5821, 5996, 6156, 6358, 6572, 6797, 6998, 7212, 7390, 7566, 7761, 7962,
    8070, 8275, 8521, 8625, 8804, 8955, 9149, 9223, 9271, 9478, 9597, 9807, 9851, 9901, 10112, 10151, 10353,
    10433, 10451, 10477, 10558, 10754, 10773, 10956, 11038, 11059, 11076, 11111, 11346, 11373, 11405, 11639,
    11670, 11689, 11731, 11956, 11978, 12048, 12260, 12281, 12305, 12395, 12591, 12607, 12758, 12886, 12912,
    13046, 13177, 13372, 13486, 13600, 13767, 14048, 14157, 14405, 14686, 14969, 15339, 15836, 16409, 17186,
    17938, 18958, 19988,
)
_LLAMA3_1_405B_OUT = (
    3, 192, 202, 206, 208, 210, 211, 212, 214, 215, 217, 219, 220, 228, 384, 396, 409, 416, 419, 421, 423, 425,
    427, 430, 432, 436, 456, 524, 561, 579, 599, 615, 626, 636, 645, 654, 663, 671, 678, 686, 691, 698, 704, 710,
    717, 723, 730, 735, 742, 747, 753, 758, 763, 769, 773, 777, 782, 786, 791, 794, 800, 805, 810, 815, 820, 824,
    828, 832, 835, 838, 841, 844, 847, 850, 852, 855, 859, 863, 867, 874, 881, 888, 896, 902, 912, 920, 929, 938,
    950, 961, 974, 989, 1002, 1016, 1031, 1048, 1068, 1088, 1125, 1174, 1830,
)
_LLAMA3_1_8B_IN = (
    79, 236, 273, 294, 309, 327, 342, 355, 369, 381, 391, 402, 414, 425, 435, 446, 458, 468, 479, 488, 497, 506,
    515, 525, 534, 544, 553, 564, 573, 583, 594, 603, 612, 621, 631, 641, 650, 659, 669, 678, 688, 696, 704, 715,
    724, 734, 745, 753, 763, 773, 784, 793, 804, 815, 826, 837, 848, 860, 873, 886, 898, 908, 920, 934, 946, 960,
    972, 984, 997, 1012, 1025, 1042, 1057, 1071, 1090, 1109, 1127, 1146, 1165, 1184, 1206, 1226, 1245, 1272,
    1298, 1324, 1352, 1383, 1412, 1444, 1480, 1529, 1580, 1628, 1686, 1750, 1810, 1891, 1984, 2118, 2540,
)
_LLAMA2_70B_IN = (
    48, 56, 63, 67, 71, 73, 76, 79, 81, 83, 85, 87, 89, 91, 92, 94, 96, 97, 99, 101, 102, 104, 105, 106, 108,
    109, 111, 112, 114, 115, 117, 118, 120, 121, 122, 124, 126, 127, 129, 130, 132, 133, 135, 137, 139, 141, 143,
    145, 148, 150, 152, 155, 158, 160, 164, 167, 170, 174, 178, 182, 186, 190, 194, 199, 203, 207, 211, 216, 221,
    227, 232, 238, 245, 252, 259, 266, 274, 283, 291, 301, 312, 324, 337, 355, 370, 390, 414, 437, 463, 492, 519,
    541, 562, 581, 598, 614, 632, 652, 687, 791, 1021,
)
_LLAMA2_70B_OUT = (
    3, 4, 6, 8, 11, 15, 18, 21, 24, 27, 31, 34, 38, 41, 45, 48, 53, 56, 59, 63, 67, 70, 74, 77, 80, 84, 87, 90,
    94, 97, 102, 105, 110, 114, 118, 122, 127, 131, 136, 141, 146, 151, 155, 160, 164, 169, 173, 177, 181, 186,
    190, 194, 198, 202, 206, 210, 214, 218, 222, 227, 231, 235, 239, 244, 248, 253, 258, 262, 267, 272, 276, 282,
    287, 292, 298, 303, 308, 314, 321, 329, 336, 344, 353, 363, 374, 384, 395, 406, 419, 435, 449, 467, 488, 509,
    535, 564, 598, 643, 699, 779, 1016,
)

_PERCENTS = np.arange(101, dtype=float)


@dataclass(frozen=True)
class LengthTable:
    """One dataset's length percentiles, 0..100 (101 values, non-decreasing)."""

    percentiles: tuple[int, ...]

    def __post_init__(self) -> None:
        p = np.asarray(self.percentiles)
        if p.shape != (101,) or np.any(np.diff(p) < 0) or p[0] < 1:
            raise ValueError("LengthTable: needs 101 non-decreasing positive percentiles")

    @cached_property
    def _values(self) -> np.ndarray:
        return np.asarray(self.percentiles, dtype=float)

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` lengths (floats) from the interpolated distribution."""
        return np.interp(rng.uniform(0.0, 100.0, size=n), _PERCENTS, self._values)

    @property
    def mean(self) -> float:
        """Mean of the interpolated distribution (the average of each percent's segment midpoint)."""
        p = self._values
        return float(((p[:-1] + p[1:]) / 2).mean())

    def scale_for_capped_mean(self, mean: float, cap: float) -> float:
        """The factor s for which min(cap, s x length) averages ``mean``: scaling the shape by
        mean / self.mean alone would lose what the cap cuts off (DeepSeek-R1's answers reach
        32,768 tokens against the benchmark's 20,000: 3,606 instead of 3,752)."""
        if not 0 < mean < cap:
            raise ValueError(f"output mean: must be in (0, cap = {cap}), got {mean}")
        grid = np.interp(np.linspace(0.0, 100.0, 20_001), _PERCENTS, self._values)
        lo, hi = 0.0, cap / grid[0]  # at hi every draw reaches the cap
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if np.minimum(grid * mid, cap).mean() < mean else (lo, mid)
        return (lo + hi) / 2


@dataclass(frozen=True)
class DatasetDistribution:
    name: str
    samples: int
    inputs: LengthTable
    outputs: LengthTable | None
    """Reference answers' token counts; None where no token count is published."""


DATASET_DISTRIBUTIONS: dict[str, DatasetDistribution] = {
    "deepseek-r1": DatasetDistribution("deepseek-r1", 4388, LengthTable(_DEEPSEEK_R1_IN),
                                       LengthTable(_DEEPSEEK_R1_OUT)),
    "llama3.1-405b": DatasetDistribution("llama3.1-405b", 8313, LengthTable(_LLAMA3_1_405B_IN),
                                         LengthTable(_LLAMA3_1_405B_OUT)),
    "llama3.1-8b": DatasetDistribution("llama3.1-8b", 13368, LengthTable(_LLAMA3_1_8B_IN), None),
    "llama2-70b": DatasetDistribution("llama2-70b", 24576, LengthTable(_LLAMA2_70B_IN), LengthTable(_LLAMA2_70B_OUT)),
}
"""By MLPerf benchmark name (sim/mlperf_datasets.py ``DatasetLengths.benchmark``)."""


def get_distribution(name: str) -> DatasetDistribution:
    try:
        return DATASET_DISTRIBUTIONS[name]
    except KeyError:
        raise ValueError(f"--dataset: unknown {name!r}; choose from {sorted(DATASET_DISTRIBUTIONS)}") from None


def dataset_means(name: str) -> tuple[int, int, int | None]:
    """(mean prompt tokens, mean output tokens of the published runs, the benchmark's
    output cap) of an MLPerf dataset: what a workload on it states beside its draws.
    The output mean is a published Offline log's tokens over samples where
    sim/published.py has one, else the reference answers'."""
    from tokenmill.sim.mlperf_datasets import DATASETS

    d = get_distribution(name)
    published = next(x for x in DATASETS if x.benchmark == name)
    return round(d.inputs.mean), round(published.osl_observed or published.osl_mean), published.osl_max


def length_draws(name: str, osl_mean: float, osl_max: int | None) -> tuple[Callable, Callable]:
    """(prompt draw, output draw) for sim/scenarios.py: each ``f(rng) -> int``.
    Outputs follow the reference shape capped at ``osl_max`` and scaled to average ``osl_mean``
    (module docstring); without a reference shape, ``osl_mean`` itself."""
    d = get_distribution(name)
    if osl_mean <= 0:
        raise ValueError(f"output mean: must be positive, got {osl_mean}")
    cap = osl_max or np.iinfo(np.int64).max
    if d.outputs is None:
        scale = None
    elif osl_max and osl_mean < osl_max:
        scale = d.outputs.scale_for_capped_mean(osl_mean, osl_max)
    else:
        scale = osl_mean / d.outputs.mean

    def prompt(rng: np.random.Generator) -> int:
        return max(1, int(round(d.inputs.draw(rng, 1)[0])))

    def output(rng: np.random.Generator) -> int:
        if scale is None:
            return max(1, int(round(osl_mean)))
        return int(min(cap, max(1, round(d.outputs.draw(rng, 1)[0] * scale))))
    return prompt, output
