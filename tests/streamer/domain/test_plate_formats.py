import pytest

from streamer.domain.plate_formats import PlateFormats


@pytest.mark.parametrize("text", ["O567AM76", "Y836XH76", "B840CK197", "AB12377", "1234AB77"])
def test_russian_plates_are_valid(text: str) -> None:
    assert PlateFormats().is_valid(text)


@pytest.mark.parametrize(
    "text", ["", "B840OK1977", "Y836EXH7O6", "Y83KXH7", "YY35XH76", "E7O7EO76", "O7O7H", "Ж567AM76"]
)
def test_misreads_are_invalid(text: str) -> None:
    assert not PlateFormats().is_valid(text)


def test_custom_formats_replace_the_defaults() -> None:
    formats = PlateFormats([r"[A-Z]{2}\d{2}[A-Z]{3}"])  # a UK-style format
    assert formats.is_valid("AB12CDE")
    assert not formats.is_valid("O567AM76")


def test_empty_format_list_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        PlateFormats([])
