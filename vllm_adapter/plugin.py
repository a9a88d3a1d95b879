"""vLLM general-plugin entry point."""

from vllm_adapter.patch import install


def register() -> None:
    """Called by ``vllm.plugins.load_general_plugins`` in every process."""
    install()
