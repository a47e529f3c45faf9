"""A command line for tests/test_cli_util.py: prints what it was started with and exits as asked.
    python -m tests.helpers.cli_probe CODE|raise|sleep [ARGS...]"""

import json
import os
import sys


def main():
    what = sys.argv[1]
    print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "probe": os.environ.get("MS_OCR_PROBE"),
                      "path0": sys.path[0], "main": __name__, "ppid": os.getppid()}))
    print("to stderr", file=sys.stderr)
    if what == "raise":
        raise ValueError("probe failure")
    if what == "sleep":
        import time
        time.sleep(60)
    sys.exit(int(what))


if __name__ == "__main__":
    main()
