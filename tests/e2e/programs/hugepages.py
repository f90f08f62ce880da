"""Each rank's 16 MiB CPU tensor: the THP_MEM_ALLOC_ENABLE it ran with and how much of it huge pages back (JSON)."""

import json
import os

import torch

tensor = torch.ones(4 << 20)  # 16 MiB of float32, every page touched
start, end = tensor.data_ptr(), tensor.data_ptr() + tensor.nbytes
huge_kib, inside = 0, False
with open("/proc/self/smaps") as smaps:
    for line in smaps:
        field = line.split()
        if "-" in field[0]:  # a mapping's header: `lo-hi perms offset dev inode [path]`
            lo, hi = (int(x, 16) for x in field[0].split("-"))
            inside = lo < end and start < hi
        elif inside and field[0] == "AnonHugePages:":
            huge_kib += int(field[1])
print(
    json.dumps({"rank": int(os.environ["RANK"]), "thp": os.environ.get("THP_MEM_ALLOC_ENABLE"), "huge_kib": huge_kib})
)
