"""Entry point of ``python -m benchmarks`` (``make bench``)."""

import sys


def main() -> int:
    print("benchmarks not written yet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
