"""The progress display of `transcribe AUDIO... ` and `transcribe batch`: a tqdm bar on stderr.

    [########----------------] 2/6 files  0.25/1.00 h audio  9.0x  ETA 0:05:00   (every length known)
    [########----------------] 2/6 files  0:00:12 audio  0:00:03 elapsed        (some length unknown)

Shown only when the caller says so (stderr is a terminal and not -q). A background thread redraws it
twice a second so the clock moves while a long model call runs; lines written through `write` and
`print` clear it first, and it is drawn again below them.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Optional, TextIO

from tqdm import tqdm


class _Bar(tqdm):
    """tqdm, cleared with "erase to the end of the line" (a narrower terminal does not wrap spaces)."""

    def clear(self, nolock: bool = False) -> None:
        if self.disable:
            return
        if not nolock:
            self._lock.acquire()
        try:
            self.fp.write("\r\033[K")
            self.fp.flush()
        except (OSError, ValueError):
            pass
        finally:
            if not nolock:
                self._lock.release()


class Progress:
    """Files done of `total`, audio done (of `total_audio` seconds when every length is known, else
    None), speed and time left, or elapsed."""

    WIDTH = 24

    def __init__(self, total: int, total_audio: Optional[float], enabled: bool, stream: Optional[TextIO] = None):
        self.total, self.total_audio, self.enabled = total, total_audio, enabled
        self.stream = stream or sys.stderr
        self.done = 0
        self.audio = 0.0
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = None
        self.bar = None
        if enabled:
            self.bar = _Bar(total=total, file=self.stream, desc=self.stats(), ascii="-#", leave=False,
                            mininterval=0, bar_format="[{bar:%d}] {n}/{total} files  {desc}" % self.WIDTH)
            self._thread = threading.Thread(target=self._tick, name="transcribe-progress", daemon=True)
            self._thread.start()

    def stats(self) -> str:
        elapsed = time.monotonic() - self.t0
        if self.total_audio is None:
            return f"{_clock(self.audio)} audio  {_clock(elapsed)} elapsed"
        speed = self.audio / elapsed if elapsed > 0 else 0.0
        left = max(0.0, self.total_audio - self.audio)
        eta = _clock(left / speed) if speed > 0 and self.done < self.total else "--:--"
        return f"{self.audio / 3600:.2f}/{self.total_audio / 3600:.2f} h audio  {speed:.1f}x  ETA {eta}"

    def line(self) -> str:
        if self.bar is not None:
            self.bar.set_description_str(self.stats(), refresh=False)
            return str(self.bar)
        return f"{self.done}/{self.total} files  {self.stats()}"

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            self._draw()

    def _draw(self) -> None:
        if self.bar is not None and not self._stop.is_set():
            try:
                self.bar.set_description_str(self.stats(), refresh=True)
            except (OSError, ValueError):
                pass

    def update(self, files: int, audio_s: float) -> None:
        self.done += files
        self.audio += audio_s
        if self.bar is not None and not self._stop.is_set():
            self.bar.set_description_str(self.stats(), refresh=False)
            self.bar.update(files)

    def print(self, text: str, stream: TextIO) -> None:
        """`text` to `stream` (stdout, a line of stderr), not mixed with the bar."""
        if self.bar is None or self._stop.is_set():
            stream.write(text)
            stream.flush()
            return
        with self.bar.get_lock():
            self.bar.clear(nolock=True)
            stream.write(text)
            stream.flush()
            self.bar.refresh(nolock=True)

    def write(self, line: str) -> None:
        """A line on the display's stream (stderr)."""
        self.print(line + "\n", self.stream)

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)
        if self.bar is not None:
            self.bar.close()
            try:  # tqdm leaves "\r" after spaces: the line is erased
                self.stream.write("\r\033[K")
                self.stream.flush()
            except (OSError, ValueError):
                pass


def _clock(seconds: float) -> str:
    s = int(seconds)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{h}:{m:02d}:{s:02d}"
