"""A synthetic corpus in wiki-18's layout, for demos and benchmarks (not for quality claims).

Passages are deterministic for a seed: a title and about forty words drawn from a small
vocabulary, so encoding cost per passage is close to a short Wikipedia passage's.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

_WORDS = [
    "river",
    "mountain",
    "city",
    "harbour",
    "valley",
    "forest",
    "island",
    "castle",
    "bridge",
    "railway",
    "museum",
    "cathedral",
    "festival",
    "kingdom",
    "republic",
    "province",
    "century",
    "war",
    "treaty",
    "election",
    "parliament",
    "university",
    "library",
    "theatre",
    "orchestra",
    "composer",
    "painter",
    "novel",
    "poem",
    "dynasty",
    "empire",
    "colony",
    "trade",
    "merchant",
    "ship",
    "fleet",
    "battle",
    "army",
    "general",
    "queen",
    "king",
    "bishop",
    "monastery",
    "garden",
    "desert",
    "glacier",
    "volcano",
    "earthquake",
    "harvest",
    "wheat",
    "copper",
    "silver",
    "gold",
    "coal",
    "steam",
    "engine",
    "telegraph",
    "radio",
    "satellite",
    "telescope",
    "comet",
    "planet",
    "moon",
    "star",
    "ocean",
    "lake",
    "canal",
    "port",
    "market",
    "bank",
    "coin",
    "tax",
    "law",
    "court",
    "judge",
    "school",
    "student",
    "teacher",
    "language",
    "alphabet",
    "manuscript",
    "archive",
    "map",
    "border",
]


def passages(count: int, seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    rows = []
    for number in range(count):
        title = " ".join(w.capitalize() for w in rng.sample(_WORDS, 2)) + f" {number}"
        text = " ".join(rng.choice(_WORDS) for _ in range(40)) + "."
        rows.append({"id": str(number), "contents": f'"{title}"\n{text.capitalize()}'})
    return rows


def write(path: Path, count: int, seed: int = 0) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as out:
        for row in passages(count, seed):
            out.write(json.dumps(row) + "\n")
    return count
