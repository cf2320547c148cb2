"""ConfigManager: one JSON file under the store root's ``config/``, loaded at start and persisted on change or on a
timer, as RocketMQ's ConfigManager and MixAll.string2File keep them.

RocketMQ writes ``name.tmp``, copies the old file to ``name.bak``, deletes ``name`` and renames the ``.tmp`` in: a
crash between the delete and the rename leaves no file, and nothing is fsynced. Here the names are the same but
the steps are safe: the new text is written to ``name.tmp`` and fsynced, the current file becomes ``name.bak``
(a hard link, so it is never missing), the ``.tmp`` is renamed over ``name`` (atomic) and the directory is fsynced.
At every instant ``name`` holds either the old or the new text, and ``name.bak`` the version before.

Load reads ``name``; when it is missing, empty or unreadable it falls back to ``name.bak`` and says so in the log,
as RocketMQ's loadBak does. Unlike RocketMQ it never starts with an empty table in place of a file it could not
read: when neither file can be decoded, load raises ConfigFileError naming the file and the field.
"""
from __future__ import annotations

import logging
import os
import stat
import threading

from .errors import ConfigFileError
from .fastjson import FastjsonDecodeError, FieldError

log = logging.getLogger(__name__)

# The largest config file rmqcore reads. consumerOffset.json for 10,000 groups x 16 queues is about 3 MB; a file
# a hundred times larger is not one a broker wrote.
MAX_CONFIG_FILE_SIZE = 512 * 1024 * 1024


def config_dir(root_dir: str) -> str:
    return os.path.join(root_dir, "config")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)


def string2file(text: str, file_name: str) -> None:
    """MixAll.string2File, crash-safe: ``file_name`` is always either the old or the new text, the old text is
    kept as ``file_name.bak``, and everything is on disk when this returns."""
    directory = os.path.dirname(file_name) or "."
    os.makedirs(directory, exist_ok=True)
    for path in (file_name, file_name + ".bak"):
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            # os.replace would fail halfway (or, for .bak, after the new text is in place): refuse before writing.
            raise ConfigFileError(path, None, "is not a regular file; the config file cannot be written over it")
    tmp = file_name + ".tmp"
    bak = file_name + ".bak"
    _write_synced(tmp, text.encode("utf-8"))
    if os.path.exists(file_name):
        bak_tmp = bak + ".tmp"
        try:
            os.unlink(bak_tmp)
        except FileNotFoundError:
            pass
        try:
            # The old file's inode becomes the backup: nothing is copied and no moment exists without the main
            # file. Filesystems without hard links get a synced copy instead.
            os.link(file_name, bak_tmp)
        except OSError:
            with open(file_name, "rb") as f:
                _write_synced(bak_tmp, f.read())
        os.replace(bak_tmp, bak)
    os.replace(tmp, file_name)
    _fsync_dir(directory)


def file2string(file_name: str) -> str | None:
    """The file's text, or None when it does not exist. Anything else in its place (a directory, a fifo, a device),
    a file that cannot be read (permissions, I/O error), one larger than MAX_CONFIG_FILE_SIZE or text that is not
    UTF-8 raises ConfigFileError naming the path; no descriptor is left open either way."""
    try:
        # O_NONBLOCK: opening a fifo for reading would otherwise wait for a writer forever; O_NOFOLLOW is not
        # used, since a config file may be a symlink an operator made.
        fd = os.open(file_name, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ConfigFileError(file_name, None, f"cannot be opened: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a fifo" if stat.S_ISFIFO(st.st_mode)
                    else "not a regular file")
            raise ConfigFileError(file_name, None, f"is {kind}, not a config file")
        if st.st_size > MAX_CONFIG_FILE_SIZE:
            raise ConfigFileError(file_name, None, f"{st.st_size} bytes is larger than the {MAX_CONFIG_FILE_SIZE} "
                                                   "bytes a config file may hold")
        chunks = []
        left = MAX_CONFIG_FILE_SIZE + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    except OSError as e:
        raise ConfigFileError(file_name, None, f"cannot be read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_FILE_SIZE:
        raise ConfigFileError(file_name, None, f"larger than the {MAX_CONFIG_FILE_SIZE} bytes a config file may hold")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigFileError(file_name, None, f"not UTF-8 text (byte {e.start})") from None


class ConfigManager:
    """Base of the broker's config files: subclasses name the file and turn text into state and back.

    ``decode(text)`` must return the new state without touching the current one (so a file that fails halfway
    changes nothing) and raise FastjsonDecodeError or FieldError on bad input; ``apply(state)`` installs it;
    ``encode(pretty)`` writes the current state as RocketMQ would.
    """

    FILE_NAME = ""

    def __init__(self, root_dir: str):
        self.root_dir = root_dir
        self._persist_lock = threading.Lock()
        self.loaded_from: str | None = None       # the file the state came from: the main file, the .bak, or None
        # The background writer (persist_later): changes asked to be written are numbered (tickets); a write
        # covers every ticket issued before it encoded the state. _cond guards the numbers and the waiters.
        self._cond = threading.Condition()
        self._requested = 0                       # the last ticket issued
        self._written = 0                         # every ticket up to this one is on disk
        self._write_error: Exception | None = None    # the last write's error (None after a good write) ...
        self._failed_through = 0                  # ... and the last ticket it was meant to cover
        self._waiters: list = []                  # (ticket, fn) for when_persisted
        self._writer: threading.Thread | None = None
        self._writer_stop = False

    def config_file_path(self) -> str:
        return os.path.join(config_dir(self.root_dir), self.FILE_NAME)

    # -- subclass hooks ---------------------------------------------------------------------------------------

    def encode(self, pretty: bool = False) -> str:
        raise NotImplementedError

    def decode(self, text: str):
        raise NotImplementedError

    def apply(self, state) -> None:
        raise NotImplementedError

    # -- load / persist ---------------------------------------------------------------------------------------

    def _decode_file(self, file_name: str):
        """(state, None) or (None, ConfigFileError) or (None, None) when the file is missing or empty."""
        try:
            text = file2string(file_name)
            if not text:
                return None, None
            return self.decode(text), None
        except ConfigFileError as e:
            return None, e
        except FastjsonDecodeError as e:
            return None, ConfigFileError(file_name, None, str(e))
        except FieldError as e:
            return None, ConfigFileError(file_name, e.field, str(e).split(": ", 1)[1])

    def load(self) -> bool:
        """Load the file (or its .bak). True when a file was read, False when neither exists (fresh state).
        Raises ConfigFileError when the file exists but neither it nor its backup can be read."""
        path = self.config_file_path()
        state, error = self._decode_file(path)
        if state is not None:
            self.apply(state)
            self.loaded_from = path
            log.info("load %s OK", path)
            return True
        main_exists = os.path.exists(path)
        if error is not None:
            log.error("load %s failed (%s), and try to load backup file", path, error)
        elif main_exists:
            error = ConfigFileError(path, None, "the file is empty")
            log.error("load %s: the file is empty, and try to load backup file", path)
        bak = path + ".bak"
        bak_state, bak_error = self._decode_file(bak)
        if bak_state is not None:
            self.apply(bak_state)
            self.loaded_from = bak
            log.warning("loaded %s from its backup %s", path, bak)
            return True
        if bak_error is not None:
            log.error("load %s failed (%s)", bak, bak_error)
            raise error if error is not None else bak_error
        if error is not None:
            raise error
        return False

    def persist(self) -> None:
        """Write the current state (pretty, as RocketMQ's persist does) crash-safely, now, in the caller's thread;
        it covers every change persist_later was asked for before."""
        with self._persist_lock:
            with self._cond:
                covers = self._requested
            try:
                string2file(self.encode(True), self.config_file_path())
            except Exception as e:
                self._done(covers, e)          # the waiters of what this write was to cover are told
                raise
        self._done(covers, None)

    # -- the background writer --------------------------------------------------------------------------------
    #
    # RocketMQ rewrites the whole file inside every change (TopicConfigManager.createTopicInSendMessageMethod calls
    # persist() under its table lock, 4.9.7 and 5.x alike; string2File, no fsync), so a change costs a write of
    # every entry: at thousands of auto-created topics that is tens of ms each, serialised. Here a change made in
    # memory asks for a write (persist_later, O(1)) and one thread writes the file for every change asked since
    # its last write, so a burst of changes costs one write, and nobody's thread waits for it unless it asks to
    # (wait_persisted, when_persisted): a caller that needs RocketMQ's "on disk before the answer" waits for its
    # ticket, sharing the write with everyone else's (and, unlike RocketMQ, the write is fsynced).

    def persist_later(self) -> int:
        """Ask the writer thread to write the current state; returns the ticket to wait for. Call after the
        change is made in memory."""
        with self._cond:
            self._requested += 1
            ticket = self._requested
            stopped = self._writer_stop
            if self._writer is None and not stopped:
                self._writer = threading.Thread(target=self._write_loop, daemon=True,
                                                name=f"ConfigPersist-{self.FILE_NAME}")
                self._writer.start()
            self._cond.notify_all()
        if stopped:
            self.persist()           # after close_writer: nobody else will write it
        return ticket

    def persisted(self, ticket: int) -> bool:
        return ticket <= self._written

    def wait_persisted(self, ticket: int, timeout: float | None = None) -> None:
        """Wait until ``ticket``'s change is on disk; raises the write's error (OSError, ConfigFileError) if the
        write meant to cover it failed, TimeoutError after ``timeout`` s."""
        with self._cond:
            if not self._cond.wait_for(lambda: ticket <= self._written or self._write_error is not None
                                       and self._failed_through >= ticket, timeout):
                raise TimeoutError(f"{self.config_file_path()} not written within {timeout} s")
            if ticket > self._written:
                raise self._write_error

    def when_persisted(self, ticket: int, fn) -> None:
        """Call ``fn(error)`` once ``ticket``'s change is on disk (error None) or its write failed (the error; the
        writer tries again later): at once when it already is, else in the writer's thread."""
        with self._cond:
            if ticket > self._written:
                self._waiters.append((ticket, fn))
                return
        fn(None)

    def close_writer(self) -> None:
        """Stop the writer thread (after a last persist(), which covers whatever it had left)."""
        with self._cond:
            self._writer_stop = True
            self._cond.notify_all()
            writer = self._writer
        if writer is not None and writer is not threading.current_thread():
            writer.join()

    def _done(self, covers: int, error: Exception | None) -> None:
        with self._cond:
            if error is None:
                self._written = max(self._written, covers)
                self._write_error = None
            else:
                self._write_error = error
                self._failed_through = max(self._failed_through, covers)
            ready = [w for w in self._waiters if w[0] <= covers]
            if ready:
                self._waiters = [w for w in self._waiters if w[0] > covers]
            self._cond.notify_all()
        for _ticket, fn in ready:
            try:
                fn(error)
            except Exception:
                log.exception("a waiter of %s failed", self.FILE_NAME)

    def _write_loop(self) -> None:
        retry = 0.0
        last_error = ""
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._requested > self._written and not (
                    self._write_error is not None and self._failed_through >= self._requested)
                    or self._writer_stop, retry or None)
                if self._writer_stop:
                    return
                if self._requested <= self._written:
                    continue
            try:
                self.persist()
                retry, last_error = 0.0, ""
            except Exception as e:
                # said once per distinct error, then tried again every second (a full disk may free up); the
                # waiters of the failed write were told by persist
                if str(e) != last_error:
                    log.error("persist %s failed, will retry: %s", self.config_file_path(), e)
                last_error = str(e)
                retry = 1.0
