"""File rules shared by every stage that reads or writes a user's file.

Reading: only regular files are opened (a FIFO or a device is refused at once instead of
blocking or streaming forever), and never more than a stated number of bytes. Writing: an
output is a regular file (or a new name); an existing folder, device, FIFO or socket, a name
ending in '/', and any file the same command reads are refused before anything is written.
Every error names the path and is of the class the caller passes (ModelError for a model,
ArtifactError for an artifact, ...).
"""

from __future__ import annotations

import os
import stat


def open_regular(path, error_cls, what: str):
    """Open `path` for binary reading if it is a regular file; return the file object.

    The file is opened non-blocking and checked with fstat, so a FIFO cannot block and a file
    swapped in after a check is still seen as it is. Raises `error_cls` ("<path>: no such file",
    "<path>: is a directory, expected <what>", "<path>: not a regular file (a FIFO ...)").
    """
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error_cls(f"{path}: no such file") from None
    except IsADirectoryError:
        raise error_cls(f"{path}: is a directory, expected {what}") from None
    except OSError as e:
        raise error_cls(f"{path}: cannot open {what}: {e.strerror or e}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise error_cls(f"{path}: is a directory, expected {what}")
        if not stat.S_ISREG(mode):
            raise error_cls(f"{path}: not a regular file ({_kind(mode)}), expected {what}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular(path, error_cls, what: str) -> None:
    """Raise `error_cls` unless `path` is an existing regular file (see open_regular)."""
    open_regular(path, error_cls, what).close()


def read_bounded(path, max_bytes: int, error_cls, what: str) -> bytes:
    """The bytes of the regular file `path`; raises `error_cls` when it is larger than `max_bytes`."""
    with open_regular(path, error_cls, what) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise error_cls(f"{path}: larger than {max_bytes} bytes, the limit for {what}")
    return data


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a plain file"


def check_output_path(path, error_cls, what: str, reads=()) -> None:
    """Raise `error_cls` unless writing the regular file `path` is safe.

    Refused: a name ending in a path separator, an existing directory, device, FIFO or socket
    (a symlink is judged by what it points to), and any file in `reads` (paths this command
    reads, e.g. the input model or the artifact being run), also through another name.
    """
    text = os.fspath(path)
    if text.endswith(os.sep) or (os.altsep and text.endswith(os.altsep)):
        raise error_cls(f"{text}: names a folder; give the {what} a file name")
    try:
        st = os.stat(text)
    except FileNotFoundError:
        return
    except OSError as e:
        raise error_cls(f"{text}: cannot write {what}: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise error_cls(f"{text}: is a directory; give the {what} a file name")
    if not stat.S_ISREG(st.st_mode):
        raise error_cls(f"{text}: is {_kind(st.st_mode)}; the {what} is written to regular files only")
    for other in reads:
        try:
            if os.path.samefile(text, other):
                raise error_cls(f"{text}: is also the input {os.fspath(other)}; choose another {what} name")
        except OSError:
            continue
