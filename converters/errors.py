"""The one error type the converters raise for anything a user must fix."""


class ConversionError(Exception):
    """A checkpoint, asset or option is wrong; the message says which and what to do."""
