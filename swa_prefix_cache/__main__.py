"""``python -m swa_prefix_cache`` (also the ``swa-prefix-cache`` console
script):

* ``qualify [...]``: this vLLM build, checked lookup by lookup against vLLM's
  own (swa_prefix_cache/vllm_adapter/qualify.py);
* ``settings``: every environment variable the package reads, with its value
  now, its default and its meaning (swa_prefix_cache/settings.py);
* ``status``: what the plugin does in this environment, installed the way
  vLLM's plugin loader installs it, as JSON (``vllm_adapter.status()``).
"""

import json
import sys

USAGE = ("usage: python -m swa_prefix_cache qualify [--lookups N] [--seed S] [--json FILE]\n"
         "       python -m swa_prefix_cache settings\n"
         "       python -m swa_prefix_cache status")


def _status() -> int:
    """Install from the settings as the plugin's entry point does (without
    its stats file), print the status, undo."""
    from swa_prefix_cache import vllm_adapter

    vllm_adapter.install()
    try:
        print(json.dumps(vllm_adapter.status(), indent=2, sort_keys=True, default=str))
    finally:
        vllm_adapter.uninstall()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["settings"]:
        from swa_prefix_cache import settings

        print(settings.format_table())
        for name in settings.unknown():
            print(f"{name} is not a setting and is ignored")
        return 0
    if args == ["status"]:
        return _status()
    if not args or args[0] != "qualify":
        print(USAGE, file=sys.stderr)
        return 2
    from swa_prefix_cache.vllm_adapter.qualify import main as qualify

    return qualify(args[1:])


if __name__ == "__main__":
    sys.exit(main())
