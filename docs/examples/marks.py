#!/usr/bin/env python3
"""Phase marks from Python: each rank stamps its start-up phases into canopy's timing report.

Run: canopy --sim-nodes 4 --ppn 2 --timing=timing.json python3 marks.py
The report then shows app.imports (and app.imports.duration), app.setup, app.first_step, ...
"""
import time

import canopy

canopy.mark("python_started")

with canopy.phase("imports"):       # one mark, with the block's duration, when the block ends
    import json                     # stands in for `import torch`

with canopy.phase("setup"):
    time.sleep(0.2 * canopy.local_rank())   # ranks finish at different times: the report names the slowest
    config = json.dumps({"rank": canopy.rank(), "size": canopy.size()})

canopy.mark("first_step")
print(f"rank {canopy.rank()} of {canopy.size()} on {canopy.node_name()} ({canopy.mode()}): {config}")
canopy.finalize()
