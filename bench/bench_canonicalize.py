"""Address canonicalisations per second (target: over 100,000/s).

Baseline, measured in the same run: the naive stdlib canonicaliser (split on
"/", ``urllib.parse.unquote`` then ``quote(safe="")`` each component) over the
same inputs, which does the encoding work but none of the validation.
"""

from __future__ import annotations

import time
from urllib.parse import quote, unquote

from harness import report
from mevedel_server.addresses import parse_address

ADDRESSES = [
    "work://shared/notes/design.md",
    "work://plans/accepted-2026-07-19T09%3a47.md",
    "work://src/caf%C3%A9/readme.md/",
    "artifact://executions/build-17.log",
    "skill://local-mevedel/review/SKILL.md",
    "skill://review@" + "ab" * 32 + "/SKILL.md",
    "agent://root/explore/tests#/result/0~1x",
    "history://saved/2026-07-19T09-47-bf87b5dd793a/segment-0001.chat.jsonl",
    "memory://local-agents/topics/python.md",
    "memory://journal/2026-07-19T09%3A47%3A00Z.md",
    "mcp://github%20server/repo%3A%2F%2Fissues%2F17",
    "shared://board-1/elements/e_42",
    "mevedel://guides/getting-started.md",
]


def naive(address: str) -> str:
    scheme, _, rest = address.partition("://")
    parts = [quote(unquote(p), safe="") for p in rest.rstrip("/").split("/")]
    return scheme + "://" + "/".join(parts)


def rate(fn, seconds: float = 1.5) -> float:
    done = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for a in ADDRESSES:
            fn(a)
        done += len(ADDRESSES)
    return done / (time.perf_counter() - start)


def main() -> None:
    for a in ADDRESSES:  # every input must be valid, or the rate means nothing
        parse_address(a)
    baseline = rate(naive)
    ours = rate(parse_address)
    report(
        "canonicalize",
        [
            {"what": "naive stdlib canonicaliser (baseline)", "per_s": round(baseline)},
            {"what": "mevedel parse_address", "per_s": round(ours)},
        ],
        {
            "ratio_ours_to_baseline": round(ours / baseline, 3),
            "target": "over 100,000/s",
            "target_met": ours > 100_000,
        },
    )


if __name__ == "__main__":
    main()
