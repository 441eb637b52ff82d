"""How many cases a property test draws: all of them under hypothesis's default profile (`make test`), a fifth
under the "check" profile that `make check`, the quick loop of development, loads with
``--hypothesis-profile=check``. The same properties are checked either way, on fewer random histories."""

from hypothesis import settings

DEFAULT = settings.get_profile("default").max_examples  # a profile's count over it is the share each test draws
settings.register_profile("check", max_examples=DEFAULT // 5)


def examples(full: int) -> int:
    """``full`` under the default profile, the loaded profile's share of it otherwise (at least one)."""
    return max(1, full * settings().max_examples // DEFAULT)
