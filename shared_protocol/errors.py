"""The one error type for malformed protocol input.

Runs on CPython and MicroPython: plain classes only, ``super().__init__`` (MicroPython
built-in exceptions have no ``__init__`` attribute to call directly).
"""


class ProtocolError(ValueError):
    """Malformed or invalid frame.

    ``field`` is a dotted path to the offending field (``audio_params.sample_rate``) or None
    when the frame as a whole is wrong; ``problem`` says what is wrong with it. ``str(err)``
    is ``"<field>: <problem>"``, or just the problem when there is no field.
    """

    def __init__(self, problem, field=None):
        self.field = field
        self.problem = problem
        super().__init__(problem if field is None else field + ": " + problem)


class UnknownMessageType(ProtocolError):
    """A well-formed message whose ``type`` we do not know: log it and carry on."""

    def __init__(self, msg_type):
        super().__init__("unknown message type " + repr(msg_type), "type")
        self.type = msg_type
