#!/usr/bin/env bash
# after-restore.sh [--destinations N] [--invoice-numbers N]
# Run once on a restored database, before web, worker and beat start again
# (docs/operations.md#backups-and-restore). Connects to $DATABASE_URL (load /etc/gpurenthub/env).
#
# Invoices issued after the restore target are gone from the database, but their customers may
# already hold their deposit addresses. Each watch-only key's derivation counter moves N indexes on
# (default 1000, more than the invoices a deployment issues in the lost stretch), so no new invoice
# is handed an address someone may still pay for a lost one. --invoice-numbers N moves each invoice
# number series on by N too (default 0: numbers stay gap-free, and a number issued in the lost
# stretch is issued again). Prints each counter before and after. Safe to run twice (it moves them twice).
set -euo pipefail
destinations=1000 invoice_numbers=0
while [ $# -gt 0 ]; do
  case $1 in
    --destinations) destinations=$2; shift 2 ;;
    --invoice-numbers) invoice_numbers=$2; shift 2 ;;
    *) sed -n '2p' "$0" >&2; exit 2 ;;
  esac
done
[[ $destinations =~ ^[0-9]+$ && $invoice_numbers =~ ^[0-9]+$ ]] || { echo "counts are whole numbers" >&2; exit 2; }
: "${DATABASE_URL:?load the environment: set -a; . /etc/gpurenthub/env; set +a}"
psql "$DATABASE_URL" --no-psqlrc -X -v ON_ERROR_STOP=1 -At -F ' ' \
  -v destinations="$destinations" -v invoice_numbers="$invoice_numbers" <<'SQL'
BEGIN;
SELECT 'destinations ' || keyset || ': ' || next_index || ' -> ' || (next_index + :destinations)
  FROM billing_derivationcounter ORDER BY keyset;
UPDATE billing_derivationcounter SET next_index = next_index + :destinations;
SELECT 'invoice numbers ' || series || ': ' || last || ' -> ' || (last + :invoice_numbers)
  FROM billing_invoicecounter WHERE :invoice_numbers > 0 ORDER BY series;
UPDATE billing_invoicecounter SET last = last + :invoice_numbers WHERE :invoice_numbers > 0;
COMMIT;
SQL
