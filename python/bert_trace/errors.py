"""The exceptions bert_trace raises, each with the one-line message the CLI prints.

Error is the base of all of them; InputError is also a ValueError (a text, an option, a label or
a dump's contents that cannot be used), FileError an OSError (a file or directory that cannot be
read or written, or is not ours to replace), NotFoundError a FileNotFoundError.
"""


class Error(Exception):
    """Anything bert_trace refuses or fails at (the CLI's exit status 2)."""


class InputError(Error, ValueError):
    """A text, an option, a label or a file's contents that cannot be used."""


class FileError(Error, OSError):
    """A file or directory that cannot be read or written, or is not bert_trace's to replace."""


class NotFoundError(FileError, FileNotFoundError):
    """A file, directory or model that is not there."""
