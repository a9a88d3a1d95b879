"""``python -m vllm_adapter qualify [...]`` (also the ``swa-prefix-cache``
console script): see vllm_adapter/qualify.py."""

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "qualify":
        print("usage: python -m vllm_adapter qualify [--lookups N] [--seed S] [--json FILE]",
              file=sys.stderr)
        return 2
    from vllm_adapter.qualify import main as qualify

    return qualify(args[1:])


if __name__ == "__main__":
    sys.exit(main())
