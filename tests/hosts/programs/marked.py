"""Run a Python program (`-m MODULE ARGS…` or `SCRIPT ARGS…`) and then write this rank's marker.

torchrun-style: reads RANK and MASTER_ADDR from the environment. The marker, $HPCDIST_MARKER_DIR/rankN,
is JSON with the rank, the hostname, MASTER_ADDR, GLOO_SOCKET_IFNAME, the program's exit status and
whether TEST_UNFORWARDED (a variable hpcdist does not forward) reached this rank.
"""

import json
import os
import runpy
import socket
import sys


def main() -> int:
    args = sys.argv[1:]
    code = 0
    try:
        if args[0] == "-m":
            sys.argv = [args[1], *args[2:]]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = args
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    marker = {
        "rank": int(os.environ["RANK"]),
        "host": socket.gethostname(),
        "master_addr": os.environ["MASTER_ADDR"],
        "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME"),
        "status": code,
        "unforwarded": "TEST_UNFORWARDED" in os.environ,
    }
    path = os.path.join(os.environ["HPCDIST_MARKER_DIR"], f"rank{marker['rank']}")
    with open(path, "w") as handle:
        json.dump(marker, handle)
    return code


if __name__ == "__main__":
    sys.exit(main())
