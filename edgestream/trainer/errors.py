"""TrainerError: a problem with a trainer that a user can fix, in one line (`edgestream train` ends with it)."""


class TrainerError(RuntimeError):
    """A problem a user can fix; the message is one line naming it."""
