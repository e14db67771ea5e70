"""The one helper the tests use to run a script under the watch, as ``gradguard run`` does."""

import json
from pathlib import Path
from typing import Tuple, Union

#: The watch's script fixtures: a ``ggNNN_bad.py``/``ggNNN_good.py`` pair per rule, and more.
SCRIPTS = Path(__file__).parent / "watch_scripts"

#: The smallest stale-gradient program (GG101 at its second step): what the install and hook tests lint.
STALE_GRADIENT_PROGRAM = (
    "import torch\n"
    "model = torch.nn.Linear(2, 1)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "for x in [torch.ones(1, 2)] * 3:\n"
    "    model(x).sum().backward()\n"
    "    optimizer.step()\n"
)


def alone(code: str) -> Tuple[str, str]:
    """The ``gradguard run`` flags that leave ``code`` the only rule reported: a test of one rule's
    scripts then never has to change when another rule is added (see tests/test_watch_rules.py)."""
    from gradguard.rules import RULES

    return ("--ignore", ",".join(c for c in RULES if c != code))


def run_script(tmp_path: Path, script: Union[Path, str], *flags: str, report: str = "") -> Tuple[int, list]:
    """Run ``script`` with ``gradguard run --mode record [flags]`` in this process and return its exit
    code and the findings of its JSON report (dicts). ``script``: a path, or the name of a script in
    :data:`SCRIPTS` without ``.py``; the report goes to ``tmp_path / report`` (default ``<stem>.json``)."""
    from gradguard.cli import main

    script = SCRIPTS / f"{script}.py" if isinstance(script, str) else script
    path = tmp_path / (report or f"{script.stem}.json")
    code = main(["run", "--mode", "record", "--report", str(path), *flags, str(script)])
    return code, json.loads(path.read_text())
