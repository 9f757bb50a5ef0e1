"""File rules shared by every stage that reads or writes a user's file.

Reading: only regular files are opened (a FIFO or a device is refused at once instead of
blocking or streaming forever), and never more than a stated number of bytes. Writing: an
output is a regular file (or a new name); an existing folder, device, FIFO or socket, a name
ending in '/', and any file the same command reads are refused before anything is written.
Every error names the path and is of the class the caller passes (ModelError for a model,
ArtifactError for an artifact, ...). IR dumps go to a folder of their own, named after the
output, written in a private folder first and created file by file exclusively.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile


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


def write_new_text(path, text: str) -> None:
    """Create the file `path` with `text`: exclusively (an existing file, or a planted symlink,
    is an error, never followed or overwritten). Raises OSError."""
    fd = os.open(os.fspath(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0), 0o644)
    with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
        f.write(text)


def dump_folder_for(output) -> str:
    """The IR dump folder of an output file: `out/model.tar` -> `out/model.dumps`."""
    head, name = os.path.split(os.fspath(output))
    stem = name.rsplit(".", 1)[0] if "." in name.strip(".") else name
    if stem + ".dumps" == name:
        stem = name
    return os.path.join(head, stem + ".dumps")


@contextlib.contextmanager
def dump_folder(output, error_cls, keep_on_error: bool = False):
    """Context for `--dump-ir`: yields a fresh private folder (mode 0700, made with mkdtemp next
    to `output`) for the dumps; when the block succeeds it replaces `dump_folder_for(output)`,
    so stale files of an earlier compile never mix in. An existing dump folder is removed
    first (a symlink there is removed, not followed); anything else at that name is refused.
    When the block fails (an error or a signal) the dumps are removed, unless `keep_on_error`
    (--verbose), which keeps them in place for the bug report.
    """
    final = dump_folder_for(output)
    try:
        st = os.lstat(final)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise error_cls(f"{final}: cannot use as IR dump folder: {e.strerror or e}") from None
    if st is not None and not (stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        raise error_cls(f"{final}: exists and is not a folder; remove it to write IR dumps there")
    folder = os.path.dirname(final) or "."
    try:
        tmp = tempfile.mkdtemp(prefix="." + os.path.basename(final) + ".", dir=folder)
    except OSError as e:
        raise error_cls(f"{final}: cannot create IR dump folder: {e.strerror or e}") from None
    try:
        yield tmp
    except BaseException:
        if keep_on_error:
            _replace_folder(tmp, final, error_cls)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    _replace_folder(tmp, final, error_cls)


def _replace_folder(tmp: str, final: str, error_cls) -> None:
    try:
        if os.path.islink(final):
            os.unlink(final)
        elif os.path.isdir(final):
            shutil.rmtree(final)
        os.chmod(tmp, 0o755)
        os.rename(tmp, final)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise error_cls(f"{final}: cannot write IR dumps: {e.strerror or e}") from None
