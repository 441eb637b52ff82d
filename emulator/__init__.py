"""A stand-in model server: the Anthropic Messages and OpenAI Chat Completions wire formats, real token
counts, a hard context limit, prompt-cache usage, injected faults, and a deterministic agent.

It imports nothing from Plimsoll: it plays the provider.
"""

from emulator.app import create_app
from emulator.config import EmulatorConfig, FaultConfig
from emulator.server import EmulatorServer
from vocab import load_encoding

__all__ = ["EmulatorConfig", "EmulatorServer", "FaultConfig", "create_app", "load_encoding"]
