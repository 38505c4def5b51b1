"""bench/metrics_cost.py's baseline server: MLX Service with its observation switched off (per-request usage,
HTTP request counts and the event log become no-ops), so the cost of observing can be measured against it.
Run as `python bench/_unobserved.py serve ...` (the arguments of `mlx-service serve`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from service import events, usage  # noqa: E402
from service.api import metrics  # noqa: E402
from service.cli import main  # noqa: E402

usage.ModelUsage.finished = lambda self, *args, **kwargs: None
metrics.RequestCounts.add = lambda self, *args, **kwargs: None
events.EventLog.record = lambda self, *args, **kwargs: {}

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
