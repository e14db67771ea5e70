"""Disagreement classes of an ``oracle_bench.py --out`` report: per (tool, rule, FP/FN), the
spec choices over-represented among the failures, and the smallest failing program.

    python benchmarks/oracle/failures.py oracle.json > failures.md
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from oracle import generate  # noqa: E402

ATTRS = ("condition", "clear_form", "clear_place", "division", "remainder", "logging")


def _key(spec: dict) -> dict:
    d = dict(spec)
    d["sizes"] = "equal" if len(set(spec["sizes"])) == 1 else "unequal"
    return d


def classes(report: dict, limit: int = 40) -> str:
    detail = report["specs_detail"]
    groups = defaultdict(list)
    for f in report["failures"]:
        groups[(f["tool"], f["code"], f["kind"])].append(f)
    # base rates of each attribute value over all programs
    base = Counter()
    total = 0
    for r in detail.values():
        k = _key(r["spec"])
        for row in r["rows"]:
            total += 1
            for a in ATTRS + ("sizes",):
                base[(a, k[a])] += 1
            base[("form", row["form"])] += 1
    out = []
    for (tool, code, kind), fs in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:limit]:
        counts = Counter()
        for f in fs:
            k = _key(detail[str(f["index"])]["spec"])
            for a in ATTRS + ("sizes",):
                counts[(a, k[a])] += 1
            counts[("form", f["form"])] += 1
        # the values that explain the class: present in (nearly) every failure, or much above base rate
        telling = sorted(counts.items(), key=lambda kv: -(kv[1] / len(fs)) / (base[kv[0]] / total))
        shown = [f"{a}={v} ({n}/{len(fs)})" for (a, v), n in telling if n / len(fs) >= 0.5 and (n / len(fs)) > 1.5 * base[(a, v)] / total][:5]
        out.append(f"### {tool} {code} {'false positive' if kind == 'FP' else 'false negative'}: {len(fs)} programs")
        out.append("")
        out.append("over-represented: " + (", ".join(shown) or "(spread over all choices)"))
        forms = Counter(f["form"] for f in fs)
        out.append("by form: " + ", ".join(f"{k} {v}" for k, v in sorted(forms.items())))
        # smallest example: shortest rendering
        best = min(fs, key=lambda f: len(generate.render(generate.Spec(**_spec(detail[str(f['index'])]['spec'])), f["form"])))
        r = detail[str(best["index"])]
        row = next(x for x in r["rows"] if x["form"] == best["form"])
        spec = generate.Spec(**_spec(r["spec"]))
        out.append("")
        out.append(f"example: spec #{best['index']} form {best['form']}: truth required {row['required']} accepted {row['accepted']}; "
                   f"lint {row['lint']}; watch {row['watch']}")
        out.append("spec: " + json.dumps({a: r["spec"][a] for a in ("k", "sizes") + ATTRS}))
        out.append("")
        out.append("```python")
        out.append(generate.render(spec, best["form"]).rstrip())
        out.append("```")
        out.append("")
    return "\n".join(out)


def _spec(d: dict) -> dict:
    d = dict(d)
    d["sizes"] = tuple(d["sizes"])
    return d


if __name__ == "__main__":
    print(classes(json.loads(Path(sys.argv[1]).read_text())))
