#!/bin/sh
# Alertmanager's entrypoint (compose.yaml's `alertmanager` service; tests/system/test_live_metrics.py
# runs it the same way): Alertmanager expands no variables, so this copies alertmanager.yml (beside
# this script) to DATA/alertmanager.yml with ${ALERT_WEBHOOK_URL} replaced by the variable's value,
# then runs Alertmanager on the copy with the arguments given.
#
#   ALERT_WEBHOOK_URL=https://ntfy.sh/my-topic start.sh DATA [alertmanager flags...]
set -eu
if [ -z "${ALERT_WEBHOOK_URL:-}" ]; then
  echo "alertmanager/start.sh: ALERT_WEBHOOK_URL is empty: set it to the URL that alerts are posted to (docs/alarms.md)" >&2
  exit 2
fi
case $ALERT_WEBHOOK_URL in
  http://*|https://*) ;;
  *) echo "alertmanager/start.sh: ALERT_WEBHOOK_URL=$ALERT_WEBHOOK_URL is not an http:// or https:// URL" >&2; exit 2 ;;
esac
case $ALERT_WEBHOOK_URL in
  *"'"*|*"
"*) echo "alertmanager/start.sh: ALERT_WEBHOOK_URL holds a quote or a line break; percent-encode it (%27, %0A)" >&2; exit 2 ;;
esac
data=${1:?usage: start.sh DATA_FOLDER [alertmanager flags...]}
shift
here=$(dirname "$0")
placeholder='${ALERT_WEBHOOK_URL}'
umask 077
out="$data/alertmanager.yml"
: > "$out.tmp"
while IFS= read -r line || [ -n "$line" ]; do
  case $line in
    *"$placeholder"*)
      printf "%s'%s'%s\n" "${line%%"$placeholder"*}" "$ALERT_WEBHOOK_URL" "${line#*"$placeholder"}" >> "$out.tmp" ;;
    *) printf '%s\n' "$line" >> "$out.tmp" ;;
  esac
done < "$here/alertmanager.yml"
mv "$out.tmp" "$out"
exec "${ALERTMANAGER:-/usr/bin/prometheus-alertmanager}" --config.file="$out" --storage.path="$data" "$@"
