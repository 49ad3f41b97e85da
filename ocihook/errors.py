"""The project's one error type: a message that fits on one line of stderr."""


class OcihookError(Exception):
    """An expected failure, reported to the user as one line and a non-zero exit."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))
