"""Text a terminal (or a person reading a metrics page) is shown, made safe: the one escaping
every command applies to what it found on disk or in a payload (names of directory entries,
reasons, headers), so that nothing there can move the cursor, clear the screen or retitle the
terminal, and a file name that is not UTF-8 shows its bytes instead of failing the output."""

from __future__ import annotations


def escape(text: str) -> str:
    """``text`` with every control, format and line-separator character shown as an escape, so
    a payload can never move the cursor, clear the screen or retitle the terminal.  A byte a
    file name could not decode (``os.listdir``'s surrogate escape) is shown as ``\\xNN``."""
    if text.isprintable():
        return text
    out = []
    for c in text:
        if c.isprintable():
            out.append(c)
        elif c in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[c])
        elif "\udc80" <= c <= "\udcff":  # an undecodable byte of a file name
            out.append(f"\\x{ord(c) - 0xDC00:02x}")
        else:
            out.append(f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")
    return "".join(out)


__all__ = ["escape"]
