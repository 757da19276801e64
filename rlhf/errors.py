"""The base of errors that are the user's to fix (bad config, data, reward file, endpoint): the CLI prints their
message without a traceback. Anything else is a bug and keeps its traceback."""


class UserError(Exception):
    """An error whose message names what is wrong (key, file, row, role, URL) and the fix."""
