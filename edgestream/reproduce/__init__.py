"""`edgestream reproduce`: the papers' headline claims, each run as an experiment and set beside the paper's
figure: ours, whether the direction holds, the ratio ours / paper, and a one-line reason for a deviation.

Every claim is a `Claim` in `CLAIMS` (claims.py): its paper and table/figure, the paper's number, and a
function that runs the experiment (simulator, virtual time; `quick` shrinks it to under two minutes
here) and returns a `Result`. `reproduce(names, quick, out)` writes `<out>/<claim>.json` per claim and
`<out>/README.md`, the table of all claims run.
"""

from edgestream.reproduce.claims import CLAIMS, Claim, Result
from edgestream.reproduce.runner import reproduce, table

__all__ = ["CLAIMS", "Claim", "Result", "reproduce", "table"]
