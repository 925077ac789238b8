"""What accounts tells the rest of the system. `accounts` imports no other app:
the apps that keep rows naming an account connect receivers to these.

account_closing(sender=Account, account=Account)
    Sent by `account_delete` inside its transaction, with the account row
    locked and the holder's password confirmed, before accounts decides
    whether the row can go. Each receiver settles its own app's rows that
    name the account: it deletes what goes with the account (an endpoint, a
    cached response: the account's own settings) and leaves what must outlive
    it (orders, invoices, ledger rows). Accounts then deletes the account when
    no row anywhere still refers to it, and otherwise keeps it, deactivated.
    A receiver may refuse the closing by raising a DomainError: the whole
    transaction rolls back and the caller gets the error.

account_deactivated(sender=Account, account=Account, actor=Account)
    Sent by `account_deactivate` (staff switch an account off) inside its
    transaction. Receivers let go of what the account holds but has not paid
    for (rentals: unpaid orders' reservations); its records stay.
"""

from django.dispatch import Signal

account_closing = Signal()  # account
account_deactivated = Signal()  # account, actor
