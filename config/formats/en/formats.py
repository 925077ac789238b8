"""Date and time formats for English pages (FORMAT_MODULE_PATH in settings):
ISO dates and 24-hour times, short and unambiguous for staff reading UTC
times in lists (`2026-12-01 15:32`) instead of `Dec. 1, 2026, 3:32 p.m.`."""

DATE_FORMAT = "Y-m-d"
DATETIME_FORMAT = "Y-m-d H:i"
TIME_FORMAT = "H:i"
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
MONTH_DAY_FORMAT = "F j"
YEAR_MONTH_FORMAT = "F Y"
