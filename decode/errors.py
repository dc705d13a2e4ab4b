"""One exception type for bad input, so every entry point can print a single clear line instead of a traceback."""


class UserError(Exception):
    """Bad input from the user: the message names the problem and the fix."""
