"""The one exception type of the package."""


class FulcrumError(Exception):
    """A refused plugin, a bad argument or a failed plugin call.

    ``code`` is one of: invalid_argument, unsupported, not_found, internal,
    permission. ``str(error)`` is one line: what, where, the value, what to do,
    with the plugin's own message when the plugin said something.
    """

    def __init__(self, code, message):
        self.code = code
        self.message = " ".join(str(message).split())
        super().__init__(self.message)
