"""Date and time formats for Spanish pages (the checkout page; FORMAT_MODULE_PATH
in settings): "3 de diciembre de 2026" and 24-hour times, "3 de diciembre de
2026 a las 15:32", as Spanish writes them. Django's own Spanish formats
(django/conf/locale/es/formats.py) give what is not set here."""

DATE_FORMAT = r"j \d\e F \d\e Y"
DATETIME_FORMAT = r"j \d\e F \d\e Y \a \l\a\s H:i"
TIME_FORMAT = "H:i"
SHORT_DATE_FORMAT = "d/m/Y"
SHORT_DATETIME_FORMAT = "d/m/Y H:i"
MONTH_DAY_FORMAT = r"j \d\e F"
YEAR_MONTH_FORMAT = r"F \d\e Y"
