#!/usr/bin/env bash
# Install or upgrade GPU Rent Hub on a Debian host: code in /opt/gpurenthub,
# data in /var/lib/gpurenthub, environment in /etc/gpurenthub/env.
# Usage (as root, from a checkout): deploy/install.sh
set -euo pipefail
APP=/opt/gpurenthub
id gpurenthub >/dev/null 2>&1 || useradd --system --home /var/lib/gpurenthub --shell /usr/sbin/nologin gpurenthub
install -d -o gpurenthub -g gpurenthub /var/lib/gpurenthub
install -d -m 0750 -g gpurenthub /etc/gpurenthub
if [ ! -f /etc/gpurenthub/env ]; then
  install -m 0640 -g gpurenthub "$(dirname "$0")/env.example" /etc/gpurenthub/env
  # The example's SECRET_KEY is a placeholder that every process refuses: a fresh random one instead.
  key=$(python3 -c 'import secrets; print(secrets.token_urlsafe(50))')
  sed -i "s|^SECRET_KEY=.*|SECRET_KEY=$key|" /etc/gpurenthub/env
fi
rsync -a --delete --exclude .venv --exclude data --exclude .git "$(dirname "$0")/../" "$APP/"
python3 -m venv "$APP/.venv"
"$APP/.venv/bin/pip" install --quiet -r "$APP/requirements.lock"
# Translation catalogs (the checkout page's Spanish): compiled from the committed .po files.
find "$APP" -path "$APP/.venv" -prune -o -path '*/LC_MESSAGES/*.po' -print | while read -r po; do
  "$APP/.venv/bin/pybabel" compile -i "$po" -o "${po%.po}.mo"
done
install -m 0644 "$(dirname "$0")"/systemd/*.service /etc/systemd/system/
systemctl daemon-reload
set -a; . /etc/gpurenthub/env; set +a
sudo -u gpurenthub -E "$APP/.venv/bin/python" "$APP/manage.py" check --deploy
sudo -u gpurenthub -E "$APP/.venv/bin/python" "$APP/manage.py" migrate --noinput
sudo -u gpurenthub -E "$APP/.venv/bin/python" "$APP/manage.py" seed_catalog
systemctl enable --now gpurenthub-web gpurenthub-worker gpurenthub-webhooks gpurenthub-beat
echo "Installed. Create a staff account: sudo -u gpurenthub -E $APP/.venv/bin/python $APP/manage.py createsuperuser"
