"""Dense rewards for training runs on models that cannot solve the task yet (tiny random ones).

Verl's GSM8K rule scores 1 only for a correct ``#### <answer>``, so a random model scores 0 on
every response: all responses of a prompt tie, GRPO's group-normalised advantages are all 0 and
so are the policy gradients, and a smoke run proves nothing about learning. ``gsm8k_dense``
keeps 1.0 for a correct final answer and otherwise gives partial credit that differs between
responses: the share of the response's characters that are digits, and how much of the ground
truth's digits the response contains. Use it through Verl's config::

    custom_reward_function.path=<this file> custom_reward_function.name=gsm8k_dense

It is a shaping signal for smoke tests and tiny models, not a measure of accuracy.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

_FINAL = re.compile(r"#### (\-?[0-9\.\,]+)")


def gsm8k_dense(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> float:
    """1.0 for the right final ``#### <answer>``; else half the response's digit share plus half
    the share of the ground truth's digits (with repeats) found in the response, in [0, 1)."""
    answer = str(ground_truth).replace(",", "")
    finals = _FINAL.findall(solution_str)
    if finals and finals[-1].replace(",", "") == answer:
        return 1.0
    if not solution_str:
        return 0.0
    digit_share = sum(char.isdigit() for char in solution_str) / len(solution_str)
    wanted = Counter(char for char in answer if char.isdigit())
    found = Counter(char for char in solution_str if char.isdigit())
    recall = sum((wanted & found).values()) / max(1, sum(wanted.values()))
    return 0.5 * digit_share + 0.49 * recall
