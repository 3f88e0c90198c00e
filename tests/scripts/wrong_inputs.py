"""Run each wrong-input case of tests/test_wrong_inputs.py in this process and report what it raised, as JSON.

usage: wrong_inputs.py CASES_JSON OUT_JSON   (CASES_JSON: {case id: python code}; run in a scratch directory)

Every case runs in a fresh namespace with the names below; what it raises (type, its bases' names, message) or
that it raised nothing is written to OUT_JSON. Environment variables a case sets are restored after it.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import warnings

warnings.simplefilter("ignore")


def prelude() -> dict[str, object]:
    import torch
    from lightning.fabric import Fabric
    from lightning.pytorch import LightningModule, Trainer
    from lightning.pytorch.demos.boring_classes import BoringModel

    quiet = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)

    def fit(**kwargs: object) -> None:
        options = {**quiet, "max_steps": 1, **kwargs}
        Trainer(**options).fit(BoringModel())  # type: ignore[arg-type]

    return {
        "torch": torch,
        "Trainer": Trainer,
        "Fabric": Fabric,
        "LightningModule": LightningModule,
        "BoringModel": BoringModel,
        "quiet": quiet,
        "fit": fit,
        "os": os,
    }


def main() -> None:
    cases = json.loads(open(sys.argv[1]).read())
    results: dict[str, object] = {}
    for case_id, code in cases.items():
        saved = dict(os.environ)
        try:
            exec(code, prelude())
        except BaseException as error:
            results[case_id] = {
                "type": type(error).__name__,
                "bases": [cls.__name__ for cls in type(error).__mro__],
                "message": str(error),
                "where": traceback.format_exception(error)[-2][-300:],
            }
        else:
            results[case_id] = None
        finally:
            os.environ.clear()
            os.environ.update(saved)
    with open(sys.argv[2], "w") as handle:
        json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
