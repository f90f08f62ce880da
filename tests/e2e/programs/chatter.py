"""Every rank prints LINES lines at once on stdout and stderr, some far longer than a pipe holds, some in parts.

Line i of rank r reads `R<r> L<i> <filler> end`; the last line has no newline. No torch: output only.
"""

import os
import sys
import time

rank = int(os.environ["RANK"])
lines = int(os.environ.get("LINES_PER_RANK", "60"))
for i in range(lines):
    filler = chr(ord("a") + rank % 26) * (200_000 if i % 10 == 3 else 3000 if i % 3 else 40)
    text = f"R{rank} L{i} {filler} end"
    if i % 4 == 0:  # in two writes, the rank's own halves: the tagger joins them
        os.write(1, text[:20].encode())
        time.sleep(0.001)  # the behaviour under test: the halves arrive apart
        os.write(1, text[20:].encode() + b"\n")
    else:
        print(text, file=sys.stderr if i % 2 else sys.stdout, flush=True)
sys.stdout.write(f"R{rank} L{lines} {chr(ord('a') + rank % 26) * 5} end")  # the last line, without a newline
