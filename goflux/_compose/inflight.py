"""What a worker process's handlers are running, where its supervisor can read it after a crash.

Under ``goflux run --workers N`` each worker keeps a file of fixed slots, mapped into
its memory (``mmap``). A handler's loop claims a slot once; while a message's handler
runs, the slot holds that message's text (for JetStream, its ``$JS.ACK`` reply
subject, which names the stream, the consumer and the sequence), and it is cleared
when the handler returns. Holding and clearing are two writes to memory, no system
call: about 0.2 µs a message. The pages belong to the file, not to the process, so
when the process dies (``os._exit``, a segfault, SIGKILL, the OOM killer) the
supervisor reads what it was handling (:func:`read_in_flight`). The text is written
before its length: a process killed in between leaves an empty slot, never a torn
text.

The layout: a header slot (a magic line, then the number of slots ever claimed as a
little-endian 32-bit count at offset :data:`COUNT_AT`), then :data:`SLOTS` slots of
:data:`SLOT_SIZE` bytes, each a native 16-bit length (0: empty) and the UTF-8 text.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from typing import Final

__all__ = ("SLOTS", "SLOT_SIZE", "TEXT_LIMIT", "InFlight", "Slot", "read_in_flight")

logger = logging.getLogger("goflux.run")

SLOT_SIZE: Final = 512
"""Bytes of one slot: a 16-bit length and up to 510 bytes of text."""
SLOTS: Final = 4096
"""Slots of one worker: handlers running at once that can be tracked (the file is sparse)."""
MAGIC: Final = b"goflux in-flight 1\n"
COUNT_AT: Final = 32
_COUNT = struct.Struct("<I")
TEXT_LIMIT: Final = SLOT_SIZE - 2
"""Longest text a slot holds, in bytes of UTF-8."""


class Slot:
    """One handler loop's place in the in-flight file (see :meth:`InFlight.claim`).

    A slot that could not be given (every slot taken) has ``index`` None, and writes
    to memory of its own: it records nothing.

    A hot loop may write through ``text`` and ``size`` itself, as :meth:`hold` and
    :meth:`clear` do, and save two calls per message (over a quarter of the cost).

    Attributes:
        text: The slot's text bytes (write the UTF-8 text first, up to
            :data:`TEXT_LIMIT` bytes).
        size: The slot's length, one 16-bit item (write it last; 0: empty).
    """

    __slots__ = ("_owner", "index", "size", "text")

    def __init__(self, owner: InFlight | None, index: int | None) -> None:
        self._owner = owner
        self.index = index
        if owner is None or index is None:
            scratch = memoryview(bytearray(SLOT_SIZE))
            self.size = scratch.cast("H")[:1]
            self.text = scratch[2:]
            return
        at = SLOT_SIZE * (index + 1)
        self.size = owner._view(owner._lengths, at // 2, at // 2 + 1)
        self.text = owner._view(owner._bytes, at + 2, at + SLOT_SIZE)

    def hold(self, text: str) -> None:
        """Record that the handler now runs the message ``text`` names.

        A text longer than a slot (510 bytes of UTF-8) is not recorded: a crash then
        counts nothing for that message.
        """
        data = text.encode()
        size = len(data)
        if size <= TEXT_LIMIT:
            self.text[:size] = data
            self.size[0] = size  # last: the text is whole once its length is set

    def clear(self) -> None:
        """Record that the handler has returned: the slot holds nothing."""
        self.size[0] = 0

    def free(self) -> None:
        """Give the slot back (its loop has ended)."""
        self.clear()
        if self._owner is not None and self.index is not None:
            self._owner._free.append(self.index)
            self._owner = None


class InFlight:
    """A worker's in-flight file: slots for what its handlers are running.

    Args:
        path: The file, created (or emptied) and sized here.

    Raises:
        OSError: The file cannot be created or mapped.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, SLOT_SIZE * (SLOTS + 1))  # sparse: pages are used when written
            self._map = mmap.mmap(fd, SLOT_SIZE * (SLOTS + 1))
        finally:
            os.close(fd)
        self._map[: len(MAGIC)] = MAGIC
        self._bytes = memoryview(self._map)
        self._lengths = self._bytes.cast("H")
        self._views: list[memoryview] = []  # released by close()
        self._claimed = 0
        self._free: list[int] = []
        self._warned = False

    def _view(self, of: memoryview, start: int, stop: int) -> memoryview:
        view = of[start:stop]
        self._views.append(view)
        return view

    def claim(self) -> Slot:
        """A slot for one handler loop; free it when the loop ends.

        When every slot is taken the slot records nothing (logged once).
        """
        if self._free:
            return Slot(self, self._free.pop())
        if self._claimed >= SLOTS:
            if not self._warned:
                self._warned = True
                logger.warning(
                    "more than %d handlers run at once: those beyond are not tracked, so a "
                    "message that crashes their worker is not recognised",
                    SLOTS,
                )
            return Slot(None, None)
        index = self._claimed
        self._claimed += 1
        _COUNT.pack_into(self._map, COUNT_AT, self._claimed)
        return Slot(self, index)

    def busy(self) -> int:
        """How many slots hold a message now."""
        lengths = self._lengths
        step = SLOT_SIZE // 2
        return sum(1 for n in range(1, self._claimed + 1) if lengths[n * step])

    def close(self) -> None:
        """Unmap the file (every slot must be done with: they stop working)."""
        for view in self._views:
            view.release()
        self._lengths.release()
        self._bytes.release()
        self._map.close()


def read_in_flight(path: str) -> list[str]:
    """The texts the slots of the in-flight file at ``path`` hold (after its worker died).

    A missing, short or foreign file holds nothing.
    """
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return []
    if not data.startswith(MAGIC) or len(data) < SLOT_SIZE:
        return []
    (claimed,) = _COUNT.unpack_from(data, COUNT_AT)
    held = []
    for index in range(min(claimed, SLOTS)):
        at = SLOT_SIZE * (index + 1)
        if at + SLOT_SIZE > len(data):
            break
        (size,) = struct.unpack_from("=H", data, at)
        if 0 < size <= TEXT_LIMIT:
            held.append(data[at + 2 : at + 2 + size].decode(errors="replace"))
    return held
