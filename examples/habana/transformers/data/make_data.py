"""Write the recipes' tiny data sets: ``corpus.txt`` (causal LM) and ``sentiment_{train,validation}.csv``.

Run once: python examples/habana/transformers/data/make_data.py. The sentences are generated from the word lists
below with a fixed seed, so the files are reproducible and free of any licence question. They are a few KB: enough
for a 2-layer model's loss to fall within a few steps, nothing more.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUBJECTS = ["the gardener", "a small fox", "the old miller", "my neighbour", "the baker", "a tired horse"]
VERBS = ["walks to", "looks at", "waits by", "sings near", "paints", "repairs"]
OBJECTS = ["the river", "the red barn", "a wooden gate", "the quiet mill", "the apple tree", "the stone bridge"]
TIMES = ["in the morning", "at noon", "before the rain", "after supper", "every sunday", "late at night"]
GOOD = ["lovely", "wonderful", "pleasant", "bright", "delightful", "cheerful"]
BAD = ["awful", "dreary", "terrible", "gloomy", "miserable", "dreadful"]
NOUNS = ["day", "walk", "song", "meal", "journey", "story"]


def corpus(rng: random.Random, sentences: int = 120) -> str:
    lines = []
    for _ in range(sentences):
        lines.append(f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TIMES)}.")
    return "\n".join(lines) + "\n"


def sentiment(rng: random.Random, rows: int) -> list[tuple[str, int]]:
    out = []
    for _ in range(rows):
        label = rng.randrange(2)
        word = rng.choice(GOOD if label else BAD)
        out.append(
            (f"{word} {rng.choice(NOUNS)}: {rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}.", label)
        )
    return out


def main() -> None:
    rng = random.Random(0)
    (HERE / "corpus.txt").write_text(corpus(rng), encoding="utf-8")
    for split, rows in (("train", 256), ("validation", 64)):
        with (HERE / f"sentiment_{split}.csv").open("w", newline="", encoding="utf-8") as file:
            writer = csv.writer(file)
            writer.writerow(["sentence", "label"])
            writer.writerows(sentiment(rng, rows))


if __name__ == "__main__":
    main()
