import pytest

from raptor.data.names import UnknownNameError, date_to_step, resolve, step_to_date

NAMES = ["Barack Obama", "Angela Merkel", "Make_statement", "China"]


def test_resolve_is_forgiving_about_case_spaces_and_underscores():
    assert resolve("barack  obama", NAMES, "entity") == 0
    assert resolve("Make statement", NAMES, "relation") == 2
    assert resolve("3", NAMES, "entity") == 3


def test_unknown_name_suggests_the_closest():
    with pytest.raises(UnknownNameError, match=r"unknown entity 'Barak Obama'; did you mean: 'Barack Obama'"):
        resolve("Barak Obama", NAMES, "entity")
    with pytest.raises(UnknownNameError, match="outside 0..3"):
        resolve("9", NAMES, "entity")


def test_dates():
    assert date_to_step("2014-01-01", "2014-01-01") == 0
    assert date_to_step("2014-03-01", "2014-01-01") == 59
    assert date_to_step("17", None) == 17
    assert step_to_date(59, "2014-01-01") == "2014-03-01"
    with pytest.raises(ValueError, match="not a date"):
        date_to_step("March 1", "2014-01-01")
    with pytest.raises(ValueError, match="start_date"):
        date_to_step("2014-03-01", None)


@pytest.mark.parametrize("granularity, start, step, label", [
    ("year", "1990-01-01", 4, "1994"),
    ("day", "2014-01-01", 59, "2014-03-01"),
    ("hour", "2018-01-01", 49, "2018-01-03 01:00"),
    ("15min", "2018-01-01T00:00", 97, "2018-01-02 00:15"),
])
def test_dates_at_every_granularity(granularity, start, step, label):
    assert step_to_date(step, start, granularity) == label
    assert date_to_step(label, start, granularity) == step
    assert step_to_date(step, None, granularity) == f"t={step}"  # no calendar: step numbers


def test_a_date_falls_in_the_step_that_holds_it():
    assert date_to_step("2018-01-02 00:29", "2018-01-01", "15min") == 97
    assert date_to_step("1994-07-01", "1990-01-01", "year") == 4
    assert date_to_step("2018-01-01", "2018-01-01T12:00", "hour") == -12


def test_whole_words_of_exactly_one_name_are_that_name():
    assert resolve("Obama", NAMES, "entity") == 0
    assert resolve("merkel", NAMES, "entity") == 1
    assert resolve("Entity 3", ["Entity 3 (X)", "Entity 30 (X)", "Entity 53 (X)"], "entity") == 0
    with pytest.raises(UnknownNameError, match="did you mean"):  # in two names: ambiguous
        resolve("Obama", ["Barack Obama", "Michelle Obama"], "entity")
    with pytest.raises(UnknownNameError):  # a part of a word is not a word
        resolve("Merk", NAMES, "entity")


def test_a_name_two_ids_share_is_ambiguous_not_the_first_of_them():
    """The audit's case: a dictionary naming ids 1 and 2 alike made `explain` answer for id 1 silently."""
    names = ["Entity 0", "Entity 1", "Entity 1", "entity 3", "Entity 3"]
    with pytest.raises(UnknownNameError, match=r"entity 'Entity 1' is ambiguous: ids 1, 2 have that name; give the id"):
        resolve("Entity 1", names, "entity")
    assert resolve("2", names, "entity") == 2
    assert resolve("Entity 3", names, "entity") == 4  # the exact spelling decides between spellings alike
    with pytest.raises(UnknownNameError, match=r"ids 3, 4"):
        resolve("ENTITY 3", names, "entity")
