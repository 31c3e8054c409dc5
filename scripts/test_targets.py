#!/usr/bin/python3
"""test_targets.py BUILD_DIR [ctest selection args...]

Prints the build targets the selected tests run: every path inside BUILD_DIR
on a selected test's command line whose file name is a target of the build
(Ninja's phony target names), e.g. the test executable itself and the helper
programs passed to it. Dependencies declared in CMake (add_dependencies, a
library) come with them when they are built. scripts/test.sh builds only
these for the sanitizer pass, instead of every tool and benchmark.
"""
import json
import os
import subprocess
import sys


def main():
    build, selection = os.path.abspath(sys.argv[1]), sys.argv[2:]
    listed = subprocess.run(["ctest", "-N", "--show-only=json-v1", *selection], cwd=build, check=True,
                            capture_output=True, text=True).stdout
    targets = subprocess.run(["ninja", "-C", build, "-t", "targets", "all"], check=True, capture_output=True,
                             text=True).stdout
    phony = {line.split(":", 1)[0] for line in targets.splitlines() if line.endswith(": phony")}
    wanted = set()
    for test in json.loads(listed).get("tests", []):
        for arg in test.get("command") or []:
            if arg.startswith(build + os.sep):
                name = os.path.basename(arg)
                if name in phony:
                    wanted.add(name)
    if not wanted:
        sys.exit(f"test_targets.py: no test targets found in {build}")
    print(" ".join(sorted(wanted)))


if __name__ == "__main__":
    main()
