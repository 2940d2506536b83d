"""A stand-in for `python -m pip install` in the tests' fake E2B sandboxes.

It prints what pip prints and "installs" a one-line module next to itself, so
that tests never reach a package index: a name starting with "no-such" fails
as an unknown package does, one starting with "slow-" takes a minute before
installing, "six" is already satisfied, anything else installs as version
1.0.0.
"""

import os
import re
import sys
import time

args = sys.argv[1:]
if not args or args[0] != "install":
    print("ERROR: the fake pip only installs", file=sys.stderr)
    sys.exit(2)
requirements = []
skip = False
for arg in args[1:]:
    if skip:
        skip = False
    elif arg == "--progress-bar":
        skip = True
    elif not arg.startswith("-"):
        requirements.append(arg)

installed = []
for requirement in requirements:
    name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
    if name.startswith("no-such"):
        print(f"ERROR: Could not find a version that satisfies the requirement {requirement} (from versions: none)", file=sys.stderr)
        print(f"ERROR: No matching distribution found for {requirement}", file=sys.stderr)
        sys.exit(1)
    if name.startswith("slow-"):
        print(f"Collecting {requirement}", flush=True)
        time.sleep(60)
    if name == "six":
        print(f"Requirement already satisfied: {requirement} in /usr/local/lib/python3.13/site-packages (1.16.0)")
        continue
    print(f"Collecting {requirement}")
    print(f"  Downloading {name}-1.0.0-py3-none-any.whl (2.0 kB)")
    module = re.sub(r"[-.]", "_", name).lower()
    with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), module + ".py"), "w") as f:
        f.write('__version__ = "1.0.0"\n')
    installed.append(f"{name}-1.0.0")
if installed:
    print("Installing collected packages: " + ", ".join(i.rsplit("-", 1)[0] for i in installed))
    print("Successfully installed " + " ".join(installed))
