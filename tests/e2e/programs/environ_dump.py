"""Write this worker's environment, as it was when the program started, to DIR/rank-RANK.json (imports nothing else)."""

import json
import os
import sys

environ = dict(os.environ)
path = os.path.join(sys.argv[1], f"rank-{environ['RANK']}.json")
with open(path + ".tmp", "w") as handle:
    json.dump(environ, handle)
os.replace(path + ".tmp", path)
