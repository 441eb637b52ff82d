"""The demo: the embedded job of ``plimsoll demo`` (``demo.run``) and the chapters it checks (``demo.chapters``),
which the tests and benchmarks read too. It may import the service and the emulator; the service never imports
it."""
