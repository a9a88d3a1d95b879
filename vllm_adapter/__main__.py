"""``python -m vllm_adapter qualify [...]`` (also the ``swa-prefix-cache``
console script): see vllm_adapter/qualify.py. ``python -m vllm_adapter
settings``: every environment variable the package reads, with its value
now, its default and its meaning (pyspec/settings.py)."""

import sys

USAGE = ("usage: python -m vllm_adapter qualify [--lookups N] [--seed S] [--json FILE]\n"
         "       python -m vllm_adapter settings")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["settings"]:
        from pyspec import settings

        print(settings.format_table())
        for name in settings.unknown():
            print(f"{name} is not a setting and is ignored")
        return 0
    if not args or args[0] != "qualify":
        print(USAGE, file=sys.stderr)
        return 2
    from vllm_adapter.qualify import main as qualify

    return qualify(args[1:])


if __name__ == "__main__":
    sys.exit(main())
