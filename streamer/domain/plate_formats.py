"""Which recognised strings are plausible licence plates.

Formats are regular expressions over the recogniser's vocabulary (Latin
look-alikes of the Cyrillic plate letters). The defaults are the Russian
formats; users list their own in the config.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

#: Letters allowed on Russian plates (Latin look-alikes of А В Е К М Н О Р С Т У Х).
RU_LETTERS = "ABEKMHOPCTYX"

#: Russian formats (GOST R 50577): name -> pattern over the whole string.
RUSSIAN_FORMATS: dict[str, str] = {
    "private": rf"[{RU_LETTERS}]\d{{3}}[{RU_LETTERS}]{{2}}\d{{2,3}}",  # A123BC77, A123BC777
    "taxi": rf"[{RU_LETTERS}]{{2}}\d{{3}}\d{{2,3}}",  # AB12377
    "trailer": rf"[{RU_LETTERS}]{{2}}\d{{4}}\d{{2,3}}",  # AB123477
    "motorcycle": rf"\d{{4}}[{RU_LETTERS}]{{2}}\d{{2,3}}",  # 1234AB77
    "transit": rf"[{RU_LETTERS}]{{2}}\d{{3}}[{RU_LETTERS}]\d{{2,3}}",  # AB123C77
}


class PlateFormats:
    """A compiled list of plate formats; a text is valid when one matches it whole."""

    def __init__(self, patterns: Iterable[str] = RUSSIAN_FORMATS.values()) -> None:
        self.patterns: Sequence[re.Pattern[str]] = tuple(re.compile(p) for p in patterns)
        if not self.patterns:
            raise ValueError("at least one plate format is needed")

    def is_valid(self, text: str) -> bool:
        return any(p.fullmatch(text) for p in self.patterns)
